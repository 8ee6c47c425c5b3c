package e2e

import (
	"context"
	"encoding/json"
	"fmt"
	"testing"
	"time"

	"github.com/twmb/franz-go/pkg/kerr"
	"github.com/twmb/franz-go/pkg/kfake"
	"github.com/twmb/franz-go/pkg/kgo"
	"github.com/twmb/franz-go/pkg/kmsg"

	"github.com/outbox-relay/outbox-relay/internal/config"
	"github.com/outbox-relay/outbox-relay/internal/fixtures"
	"github.com/outbox-relay/outbox-relay/internal/layout"
	"github.com/outbox-relay/outbox-relay/internal/pgtest"
)

// TestTerminalFailuresUnderBacklogDrain guards the order book's verdicts:
// after a terminal failure a key goes on, and a key left pending by one
// batch is held in the database rather than deferred batch after batch.
// Keys whose every row goes to a topic the broker refuses for good, under a
// backlog claimed by four batches in flight: every refused row is
// dead-lettered and every other row delivered, in order per key. (A relay
// that deferred a refused key's later rows to the next batch, which was
// already claimed and deferred them again, froze the whole source here.)
func TestTerminalFailuresUnderBacklogDrain(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	dsn, pool := pgtest.NewDB(t)
	pgtest.Exec(t, pool, fixtures.Seed001)
	c := kafkaCluster(t, kfake.SeedTopics(4, "orders", "refused"))
	brokers := c.ListenAddrs()
	c.Fault(kfake.Fault{Keys: []kmsg.Key{kmsg.Produce}, Topic: "refused", Err: kerr.InvalidRecord, Count: -1})

	const keys, perKey = 40, 30
	refused := 0
	_, err := pool.Exec(ctx, `INSERT INTO outbox (aggregate_type, aggregate_id, event_type, topic, payload, created_at)
SELECT 'Order', ('00000000-0000-0000-0000-' || lpad(k::text, 12, '0'))::uuid, 'order.placed',
  CASE WHEN k % 4 = 0 THEN 'refused' ELSE 'orders' END,
  jsonb_build_object('k', k, 'n', n), '2026-01-01'::timestamptz + (n * 1000 + k) * interval '1 millisecond'
FROM generate_series(1, $1::int) n, generate_series(1, $2::int) k`, perKey, keys)
	if err != nil {
		t.Fatal(err)
	}
	refused = perKey * (keys / 4)
	delivered := keys*perKey - refused
	col := collect(t, brokers, "orders")
	cfg := baseConfig(dsn, brokers, config.Source{
		Name: "shop", Table: "public.outbox", Preset: "status", BatchSize: 50, Pipeline: 4,
		Backoff: config.Backoff{Initial: config.Duration(50 * time.Millisecond), Max: config.Duration(time.Second)},
	})
	runRelay(t, cfg)
	recs := col.waitDistinct(t, delivered, 60*time.Second)
	waitFor(t, 30*time.Second, "every refused row dead-lettered", func() (bool, string) {
		var n int
		_ = pool.QueryRow(ctx, "SELECT count(*) FROM outbox_relay.failed_events").Scan(&n)
		return n == refused, fmt.Sprintf("%d/%d", n, refused)
	})
	checkOrderByPayload(t, recs)
	var pending int
	_ = pool.QueryRow(ctx, "SELECT count(*) FROM outbox WHERE status = 'pending'").Scan(&pending)
	if pending != 0 {
		t.Fatalf("%d rows still pending", pending)
	}
}

// checkOrderByPayload checks that each key's events (payload {"k", "n"})
// were first delivered in n order. A key's records share a partition, so the
// collector sees them in the order the broker stored them.
func checkOrderByPayload(t *testing.T, recs []*kgo.Record) {
	t.Helper()
	seen := map[string]bool{}
	last := map[int]int{}
	for _, r := range recs {
		id, _ := header(r, "event_id")
		if seen[id] {
			continue
		}
		seen[id] = true
		var p struct{ K, N int }
		if err := json.Unmarshal(r.Value, &p); err != nil {
			t.Fatalf("payload %q: %v", r.Value, err)
		}
		if p.N <= last[p.K] {
			t.Fatalf("key %d: event %d first delivered after event %d", p.K, p.N, last[p.K])
		}
		last[p.K] = p.N
	}
}

// TestKeylessRowsNeverWaitOnEachOther guards the claim's and the order
// book's treatment of rows without a key: they have no order, so one keyless
// row backing off holds no other keyless row (a claim that held the empty
// order key like any other held every keyless row of the source).
func TestKeylessRowsNeverWaitOnEachOther(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	dsn, pool := pgtest.NewDB(t)
	pgtest.Exec(t, pool, `CREATE TABLE events (id bigserial PRIMARY KEY, topic text NOT NULL, k text, payload jsonb NOT NULL)`)
	c := kafkaCluster(t, kfake.SeedTopics(2, "orders", "flaky"))
	brokers := c.ListenAddrs()
	c.Fault(kfake.Fault{Keys: []kmsg.Key{kmsg.Produce}, Topic: "flaky", Err: kerr.NotEnoughReplicas, Count: -1})
	// The first row fails retryably for ever; the keyless rows after it,
	// and a keyed one, must all go while it backs off.
	_, err := pool.Exec(ctx, `INSERT INTO events (topic, k, payload) VALUES ('flaky', NULL, '{"n":0}');
INSERT INTO events (topic, k, payload) SELECT 'orders', CASE WHEN n = 50 THEN 'a' END, jsonb_build_object('n', n) FROM generate_series(1, 50) n`)
	if err != nil {
		t.Fatal(err)
	}
	col := collect(t, brokers, "orders")
	cfg := baseConfig(dsn, brokers, config.Source{
		Name: "ev", Table: "public.events", BatchSize: 5,
		Layout: layout.Spec{ID: "id", Payload: "payload", Topic: "{topic}", Key: "{k}", State: layout.State{Mode: "delete"}},
		// A long backoff: the failing row stays in retry_state for the
		// whole test.
		Backoff: config.Backoff{Initial: config.Duration(time.Minute), Max: config.Duration(time.Minute)},
	})
	s := cfg.Sinks["kafka"]
	s.RecordRetries = 1
	cfg.Sinks["kafka"] = s
	runRelay(t, cfg)
	col.waitDistinct(t, 50, 30*time.Second)
	var attempts int
	if err := pool.QueryRow(ctx, "SELECT attempts FROM outbox_relay.retry_state").Scan(&attempts); err != nil || attempts != 1 {
		t.Fatalf("the failing row's retry state: attempts %d, %v", attempts, err)
	}
}
