package e2e

import (
	"context"
	"fmt"
	"testing"
	"time"

	"github.com/twmb/franz-go/pkg/kadm"
	"github.com/twmb/franz-go/pkg/kerr"
	"github.com/twmb/franz-go/pkg/kfake"
	"github.com/twmb/franz-go/pkg/kgo"
	"github.com/twmb/franz-go/pkg/kmsg"

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

// TestKeyOrderAcrossSinksSharingADestinationName routes one key's first row
// to topic "orders" on one cluster and its second row to topic "orders" on
// another: the same destination name and key, but two sinks, so no broker
// orders them. While the first cluster fails every produce, the first row
// backs off and the second must not be published; once the first cluster
// recovers, both arrive, the second after the first. A row of another key
// bound for the second cluster flows meanwhile.
func TestKeyOrderAcrossSinksSharingADestinationName(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	dsn, pool := pgtest.NewDB(t)
	pgtest.Exec(t, pool, `CREATE TABLE outbox (
  id BIGSERIAL PRIMARY KEY, aggregate_type TEXT NOT NULL, aggregate_id TEXT NOT NULL, event_type TEXT NOT NULL,
  payload JSONB NOT NULL, created_at TIMESTAMPTZ NOT NULL DEFAULT clock_timestamp(),
  published BOOLEAN NOT NULL DEFAULT false, published_at TIMESTAMPTZ)`)
	var first, second, other int64
	for _, r := range []struct {
		agg, typ string
		id       *int64
	}{{"k", "first", &first}, {"k", "second", &second}, {"z", "second", &other}} {
		if err := pool.QueryRow(ctx, `INSERT INTO outbox (aggregate_type, aggregate_id, event_type, payload)
VALUES ('Order', $1, $2, '{}') RETURNING id`, r.agg, r.typ).Scan(r.id); err != nil {
			t.Fatal(err)
		}
	}

	a := kafkaCluster(t, kfake.SeedTopics(1, "orders"))
	b := kafkaCluster(t, kfake.SeedTopics(1, "orders"))
	fault := a.Fault(kfake.Fault{Keys: []kmsg.Key{kmsg.Produce}, Topic: "orders", Err: kerr.NotEnoughReplicas, Count: -1})
	defer fault.Remove()
	cfg := baseConfig(dsn, a.ListenAddrs(), config.Source{
		Name: "orders", Table: "public.outbox", Preset: "published-flag", MaxAttempts: 1000,
		Backoff: config.Backoff{Initial: config.Duration(20 * time.Millisecond), Max: config.Duration(100 * time.Millisecond)},
		Routes: []config.Route{
			{Name: "first", EventTypes: []string{"first"}, Sink: "kafka", Topic: "orders"},
			{Name: "second", EventTypes: []string{"second"}, Sink: "other", Topic: "orders"},
		},
	})
	s := cfg.Sinks["kafka"]
	s.RecordRetries = 1
	s.DeliveryTimeout = config.Duration(2 * time.Second)
	cfg.Sinks["kafka"] = s
	cfg.Sinks["other"] = config.Sink{Type: "kafka", Brokers: b.ListenAddrs()}
	cfg.ApplyDefaults()
	colA := collect(t, a.ListenAddrs(), "orders")
	colB := collect(t, b.ListenAddrs(), "orders")
	runRelay(t, cfg)

	// The first row's failures are committed: every batch that held it has
	// finished publishing, so whatever it sent is in the second cluster's log.
	waitFor(t, 30*time.Second, "the first row's failed attempts recorded", func() (bool, string) {
		var n int
		err := pool.QueryRow(ctx, `SELECT attempts FROM outbox_relay.retry_state WHERE source = 'orders' AND event_id = $1`,
			fmt.Sprint(first)).Scan(&n)
		return err == nil && n >= 2, fmt.Sprint(n, err)
	})
	admin, err := kgo.NewClient(kgo.SeedBrokers(b.ListenAddrs()...))
	if err != nil {
		t.Fatal(err)
	}
	defer admin.Close()
	ends, err := kadm.NewClient(admin).ListEndOffsets(ctx, "orders")
	if err != nil || ends.Error() != nil {
		t.Fatal(err, ends.Error())
	}
	end, _ := ends.Lookup("orders", 0)
	// Only the other key's row may be there.
	waitFor(t, 30*time.Second, "the other key's row on the second cluster", func() (bool, string) {
		recs := colB.records()
		return int64(len(recs)) >= end.Offset, fmt.Sprintf("%d of %d records read", len(recs), end.Offset)
	})
	for _, r := range colB.records() {
		if string(r.Key) == "k" {
			id, _ := header(r, "event_id")
			t.Fatalf("row %s of key k published to the second cluster while the key's row %d was failing on the first", id, first)
		}
	}

	fault.Remove()
	waitFor(t, 30*time.Second, "both rows of k and the row of z delivered", func() (bool, string) {
		return len(distinct(colA.records())) >= 1 && len(distinct(colB.records())) >= 2,
			fmt.Sprintf("%d on the first cluster, %d on the second", len(distinct(colA.records())), len(distinct(colB.records())))
	})
	ra := distinct(colA.records())[fmt.Sprint(first)]
	rb := distinct(colB.records())[fmt.Sprint(second)]
	if ra == nil || rb == nil || distinct(colB.records())[fmt.Sprint(other)] == nil {
		t.Fatalf("first %v, second %v: a row went to the wrong cluster", ra, rb)
	}
	if rb.Timestamp.Before(ra.Timestamp) {
		t.Errorf("second row produced at %v, before the first at %v", rb.Timestamp, ra.Timestamp)
	}
}
