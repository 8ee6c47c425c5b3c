package e2e

import (
	"context"
	"fmt"
	"testing"
	"time"

	"github.com/twmb/franz-go/pkg/kfake"

	"github.com/outbox-relay/outbox-relay/internal/config"
	"github.com/outbox-relay/outbox-relay/internal/pgtest"
)

// TestRoutes sends one source's events to different sinks: payment events
// to a second cluster, rows of region eu to that cluster under a topic of
// their own route, the rest to the source's sink. A route topic that renders
// NULL dead-letters the row, and the relay goes on.
func TestRoutes(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	dsn, pool := pgtest.NewDB(t)
	pgtest.Exec(t, pool, `CREATE TABLE outbox (
  id BIGSERIAL PRIMARY KEY, aggregate_type TEXT NOT NULL, aggregate_id TEXT NOT NULL, event_type TEXT NOT NULL,
  region TEXT, payload JSONB NOT NULL, created_at TIMESTAMPTZ NOT NULL DEFAULT now(),
  published BOOLEAN NOT NULL DEFAULT false, published_at TIMESTAMPTZ)`)
	type ev struct{ typ, region string }
	events := []ev{
		{"order.created", "us"}, {"payment.captured", "us"}, {"order.shipped", "eu"},
		{"payment.refunded", "eu"}, {"order.created", ""}, {"order.cancelled", "eu"},
	}
	for i, e := range events {
		var region any
		if e.region != "" {
			region = e.region
		}
		if _, err := pool.Exec(ctx, `INSERT INTO outbox (aggregate_type, aggregate_id, event_type, region, payload)
VALUES ('Order', $1, $2, $3, '{}')`, fmt.Sprintf("o%d", i), e.typ, region); err != nil {
			t.Fatal(err)
		}
	}
	// A route whose topic needs a column that is NULL on this row.
	pgtest.Exec(t, pool, `INSERT INTO outbox (aggregate_type, aggregate_id, event_type, region, payload)
VALUES ('Order', 'o-null', 'audit.logged', NULL, '{}')`)

	main := kafkaCluster(t, kfake.SeedTopics(1, "order.created", "order.cancelled"))
	other := kafkaCluster(t, kfake.SeedTopics(1, "payments", "eu-orders"))
	cfg := baseConfig(dsn, main.ListenAddrs(), config.Source{Name: "orders", Table: "public.outbox", Preset: "published-flag"})
	cfg.Sinks["other"] = config.Sink{Type: "kafka", Brokers: other.ListenAddrs()}
	cfg.Sources[0].Routes = []config.Route{
		{Name: "payments", EventTypes: []string{"payment.captured", "payment.refunded"}, Sink: "other", Topic: "payments"},
		{Name: "eu", Column: "region", Values: []string{"eu"}, Sink: "other", Topic: "{region}-orders"},
		{Name: "audit", EventTypes: []string{"audit.logged"}, Sink: "other", Topic: "{region}-audit"},
	}
	cfg.ApplyDefaults()
	if err := cfg.Validate(); err != nil {
		t.Fatal(err)
	}
	mainCol := collect(t, main.ListenAddrs(), "order.created", "order.cancelled")
	otherCol := collect(t, other.ListenAddrs(), "payments", "eu-orders")
	runRelay(t, cfg)

	got := map[string]string{} // aggregate id -> cluster/topic
	waitFor(t, 30*time.Second, "six events routed", func() (bool, string) {
		for _, r := range mainCol.records() {
			got[string(r.Key)] = "main/" + r.Topic
		}
		for _, r := range otherCol.records() {
			got[string(r.Key)] = "other/" + r.Topic
		}
		return len(got) >= 6, fmt.Sprint(got)
	})
	want := map[string]string{
		"o0": "main/order.created", "o1": "other/payments", "o2": "other/eu-orders",
		"o3": "other/payments", // the first matching route wins
		"o4": "main/order.created", "o5": "other/eu-orders",
	}
	for k, v := range want {
		if got[k] != v {
			t.Errorf("event %s went to %s, want %s", k, got[k], v)
		}
	}
	if len(got) != len(want) {
		t.Errorf("routed %v, want %v", got, want)
	}
	waitFor(t, 30*time.Second, "the NULL-topic row dead-lettered", func() (bool, string) {
		var reason string
		err := pool.QueryRow(ctx, `SELECT failure_reason FROM outbox_relay.failed_events WHERE event_type = 'audit.logged'`).Scan(&reason)
		return err == nil, fmt.Sprint(reason, err)
	})
}
