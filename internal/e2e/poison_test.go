package e2e

import (
	"context"
	"fmt"
	"strings"
	"testing"
	"time"

	"github.com/twmb/franz-go/pkg/kerr"
	"github.com/twmb/franz-go/pkg/kfake"
	"github.com/twmb/franz-go/pkg/kmsg"

	"github.com/outbox-relay/outbox-relay/internal/config"
	"github.com/outbox-relay/outbox-relay/internal/fixtures"
	"github.com/outbox-relay/outbox-relay/internal/pgtest"
	"github.com/outbox-relay/outbox-relay/internal/source/postgres"
)

// TestPoisonIsolatedThenReplayed: a row whose topic always fails spends its
// own retry budget (seed 001's per-row max_retries) while every other key
// keeps flowing; the row of the poison's key written after it waits until
// the poison is dead-lettered, then goes; a replay puts the poison back and
// it is published once the broker accepts it.
func TestPoisonIsolatedThenReplayed(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	dsn, pool := pgtest.NewDB(t)
	pgtest.Exec(t, pool, fixtures.Seed001)
	c := kafkaCluster(t, kfake.SeedTopics(4, "orders", "poison"))
	brokers := c.ListenAddrs()
	fault := c.Fault(kfake.Fault{Keys: []kmsg.Key{kmsg.Produce}, Topic: "poison", Err: kerr.NotEnoughReplicas, Count: -1})

	const poisonKey = "66666666-6666-6666-6666-666666666666"
	insert := func(topic, agg string, maxRetries, i int) string {
		var id string
		err := pool.QueryRow(ctx, `INSERT INTO outbox (aggregate_type, aggregate_id, event_type, topic, payload, max_retries, created_at)
VALUES ('Order', $1, 'order.placed', $2, jsonb_build_object('i', $3::int), $4, clock_timestamp()) RETURNING id::text`, agg, topic, i, maxRetries).Scan(&id)
		if err != nil {
			t.Fatal(err)
		}
		return id
	}
	poison := insert("poison", poisonKey, 2, 0) // 3 attempts in all
	follower := insert("orders", poisonKey, 5, 1)
	var others []string
	for i := range 50 {
		others = append(others, insert("orders", fmt.Sprintf("00000000-0000-0000-0000-%012d", i), 5, 100+i))
	}
	col := collect(t, brokers, "orders", "poison")
	cfg := baseConfig(dsn, brokers, config.Source{
		Name: "shop", Table: "public.outbox", Preset: "status", BatchSize: 20,
		// Long enough for the other keys to be delivered before the
		// poison's budget is spent, even on a loaded machine.
		Backoff: config.Backoff{Initial: config.Duration(2 * time.Second), Max: config.Duration(4 * time.Second)},
	})
	s := cfg.Sinks["kafka"]
	s.RecordRetries = 1
	cfg.Sinks["kafka"] = s
	stop := runRelay(t, cfg)

	// Every other key is delivered while the poison is still being retried.
	waitFor(t, 20*time.Second, "the other keys", func() (bool, string) {
		got := distinct(col.records())
		n := 0
		for _, id := range others {
			if got[id] != nil {
				n++
			}
		}
		return n == len(others), fmt.Sprintf("%d/%d", n, len(others))
	})
	var deadNow int
	_ = pool.QueryRow(ctx, "SELECT count(*) FROM outbox_relay.failed_events").Scan(&deadNow)
	if deadNow != 0 {
		t.Fatalf("poison dead-lettered before the other keys were delivered; test timing is off")
	}
	if _, ok := distinct(col.records())[follower]; ok {
		t.Fatal("the poison's follower was published while the poison was still being retried")
	}

	// After its budget the poison is dead-lettered, in the same transaction
	// that marks its row failed.
	waitFor(t, 20*time.Second, "the poison in failed_events", func() (bool, string) {
		var n int
		_ = pool.QueryRow(ctx, "SELECT count(*) FROM outbox_relay.failed_events WHERE original_event_id = $1", poison).Scan(&n)
		return n == 1, "not yet"
	})
	var reason string
	var count int
	var deadAt time.Time
	if err := pool.QueryRow(ctx, "SELECT failure_reason, failure_count, last_failed_at FROM outbox_relay.failed_events WHERE original_event_id = $1", poison).Scan(&reason, &count, &deadAt); err != nil {
		t.Fatal(err)
	}
	if count != 3 || !strings.Contains(reason, "after 3 attempts") || !strings.Contains(reason, "NOT_ENOUGH_REPLICAS") {
		t.Fatalf("dead letter: count %d, reason %q", count, reason)
	}
	var status string
	var retries int
	_ = pool.QueryRow(ctx, "SELECT status, retry_count FROM outbox WHERE id = $1", poison).Scan(&status, &retries)
	if status != "failed" || retries != 3 {
		t.Fatalf("poison row: status %q retry_count %d", status, retries)
	}
	// Its key moves on: the follower is published, after the dead letter.
	waitFor(t, 20*time.Second, "the follower", func() (bool, string) {
		_, ok := distinct(col.records())[follower]
		return ok, "not yet"
	})
	if r := distinct(col.records())[follower]; r.Timestamp.Before(deadAt.Add(-50 * time.Millisecond)) {
		t.Fatalf("follower produced at %v, before the poison was dead-lettered at %v", r.Timestamp, deadAt)
	}
	stop()

	// Replay once the broker is fixed.
	fault.Remove()
	evs, err := postgres.ListFailed(ctx, pool, "outbox_relay", postgres.DLQFilter{Source: "shop"})
	if err != nil || len(evs) != 1 || evs[0].OriginalEventID != poison {
		t.Fatalf("dlq list: %+v %v", evs, err)
	}
	runRelay(t, cfg)
	replayWithStore(t, ctx, dsn, cfg, evs)
	waitFor(t, 20*time.Second, "the replayed poison", func() (bool, string) {
		_, ok := distinct(col.records())[poison]
		return ok, "not yet"
	})
	var replayed *time.Time
	var audits int
	_ = pool.QueryRow(ctx, "SELECT replayed_at FROM outbox_relay.failed_events WHERE id = $1", evs[0].ID).Scan(&replayed)
	_ = pool.QueryRow(ctx, "SELECT count(*) FROM outbox_relay.failed_event_audit WHERE failed_event_id = $1 AND action = 'replay'", evs[0].ID).Scan(&audits)
	if replayed == nil || audits != 1 {
		t.Fatalf("after replay: replayed_at %v, audit rows %d", replayed, audits)
	}
	waitFor(t, 10*time.Second, "the replayed row published", func() (bool, string) {
		_ = pool.QueryRow(ctx, "SELECT status FROM outbox WHERE id = $1", poison).Scan(&status)
		return status == "published", status
	})
}
