package bench

import (
	"context"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus"

	"github.com/outbox-relay/outbox-relay/internal/pgtest"
)

// The sources a relay relays are read from its state gauge.
func TestRelayingSources(t *testing.T) {
	t.Parallel()
	reg := prometheus.NewRegistry()
	if n := relayingSources(reg); n != 0 {
		t.Errorf("empty registry: %d sources, want 0", n)
	}
	g := prometheus.NewGaugeVec(prometheus.GaugeOpts{Name: "outbox_relay_source_relaying"}, []string{"source"})
	reg.MustRegister(g)
	g.WithLabelValues("idle@tenants/a").Set(1)
	g.WithLabelValues("idle@tenants/b").Set(0)
	g.WithLabelValues("idle@tenants/c").Set(1)
	other := prometheus.NewGauge(prometheus.GaugeOpts{Name: "outbox_relay_other"})
	other.Set(5)
	reg.MustRegister(other)
	if n := relayingSources(reg); n != 2 {
		t.Errorf("%d sources, want 2", n)
	}
}

// Idle databases: every one held, its statements and transactions
// counted, its connections seen at the server.
func TestIdleDatabases(t *testing.T) {
	if testing.Short() {
		t.Skip("needs PostgreSQL")
	}
	rep, err := Run(context.Background(), Options{Workload: "idle", DSN: pgtest.AdminDSN(), Databases: 3, MaxConns: 2,
		Duration: 6 * time.Second, Partitions: 1, InProcessBroker: true})
	if err != nil {
		t.Fatal(err)
	}
	if len(rep.Idle) != 1 {
		t.Fatalf("%d results, want 1", len(rep.Idle))
	}
	r := rep.Idle[0]
	if r.Databases != 3 || r.Sources != 3 || r.StatementsPerSec <= 0 || r.TransactionsPerSec <= 0 {
		t.Errorf("%+v: want 3 databases and sources, statements and transactions counted", r)
	}
	if r.PerDatabase != r.StatementsPerSec/3 || r.Connections < 3 || r.Connections > 3*(2+1) {
		t.Errorf("%.2f statements/s per database of %.2f, %d connections: want a third, 3 to 9 connections", r.PerDatabase, r.StatementsPerSec, r.Connections)
	}
}
