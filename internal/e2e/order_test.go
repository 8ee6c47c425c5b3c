package e2e

import (
	"context"
	"fmt"
	"math/rand/v2"
	"sync"
	"testing"
	"time"

	"github.com/twmb/franz-go/pkg/kerr"
	"github.com/twmb/franz-go/pkg/kfake"
	"github.com/twmb/franz-go/pkg/kmsg"

	"github.com/outbox-relay/outbox-relay/internal/config"
	"github.com/outbox-relay/outbox-relay/internal/fixtures"
	"github.com/outbox-relay/outbox-relay/internal/pgtest"
)

// TestPerKeyOrderWithFailures writes events for 1,000 keys while the relay
// runs and the broker fails a share of produce requests, so the relay
// retries rows itself (the sink's own retries are set to one). Every event
// must arrive, and per key the first arrival of each event must follow the
// order in which the key's events were written.
func TestPerKeyOrderWithFailures(t *testing.T) {
	t.Parallel()
	const (
		keys      = 1000
		perKey    = 12
		producers = 4
	)
	ctx := context.Background()
	dsn, pool := pgtest.NewDB(t)
	pgtest.Exec(t, pool, fixtures.Seed000)
	c := kafkaCluster(t, kfake.SeedTopics(8, "journey.created"))
	brokers := c.ListenAddrs()
	var mu sync.Mutex
	rng := rand.New(rand.NewPCG(1, 2))
	fault := c.Fault(kfake.Fault{
		Keys: []kmsg.Key{kmsg.Produce}, Err: kerr.NotEnoughReplicas, Count: -1,
		When: func(kmsg.Request) bool {
			mu.Lock()
			defer mu.Unlock()
			return rng.Float64() < 0.15
		},
	})
	col := collect(t, brokers, "journey.created")
	cfg := baseConfig(dsn, brokers, config.Source{
		Name: "orders", Table: "journey_matcher.outbox", Preset: "published-flag", BatchSize: 200, Pipeline: 4,
		MaxAttempts: 1000, Backoff: config.Backoff{Initial: config.Duration(5 * time.Millisecond), Max: config.Duration(50 * time.Millisecond)},
	})
	s := cfg.Sinks["kafka"]
	s.RecordRetries = 1
	s.DeliveryTimeout = config.Duration(2 * time.Second)
	// A call the faulty broker leaves unanswered is cut after 5 s, not the
	// default 35 s: under load such calls opened the circuit for longer
	// than the test waits, which is not what it is about.
	s.Timeout = config.Duration(5 * time.Second)
	cfg.Sinks["kafka"] = s
	stop := runRelay(t, cfg)

	aggs := make([]string, keys)
	for i := range aggs {
		aggs[i] = fmt.Sprintf("00000000-0000-0000-0000-%012d", i)
	}
	// Each producer owns a slice of the keys and writes each key's events in
	// order, several keys per transaction, while the relay runs.
	var wg sync.WaitGroup
	for p := range producers {
		wg.Go(func() {
			for seq := range perKey {
				for k := p; k < keys; k += producers * 10 {
					tx, err := pool.Begin(ctx)
					if err != nil {
						t.Error(err)
						return
					}
					for j := k; j < min(k+producers*10, keys); j += producers {
						_, err := tx.Exec(ctx, `INSERT INTO journey_matcher.outbox (aggregate_id, aggregate_type, event_type, payload, correlation_id, created_at)
VALUES ($1, 'journey', 'journey.created', jsonb_build_object('key', $2::int, 'seq', $3::int), gen_random_uuid(), clock_timestamp())`, aggs[j], j, seq)
						if err != nil {
							t.Error(err)
						}
					}
					if err := tx.Commit(ctx); err != nil {
						t.Error(err)
						return
					}
				}
			}
		})
	}
	wg.Wait()
	total := keys * perKey
	run := keyOrderRun{keys: keys, perKey: perKey, deadLetters: func() (map[[2]int]string, error) {
		rows, err := pool.Query(ctx, "SELECT (payload->>'key')::int, (payload->>'seq')::int, failure_reason FROM outbox_relay.failed_events")
		if err != nil {
			return nil, err
		}
		defer rows.Close()
		return scanDeadLetters(rows.Scan, rows.Next, rows.Err)
	}}
	dups, dead := run.await(t, col, 90*time.Second)
	stop()
	fault.Remove()
	var retried int64
	if err := pool.QueryRow(ctx, "SELECT total_events_retried FROM outbox_relay.relay_state WHERE source = 'orders'").Scan(&retried); err != nil {
		t.Fatal(err)
	}
	t.Logf("%d events, %d keys: %d produce requests failed, %d rows retried by the relay, %d duplicates, %d overtaken and dead-lettered",
		total, keys, fault.Hits(), retried, dups, dead)
	if fault.Hits() == 0 || retried == 0 {
		t.Fatalf("the failure path was not exercised (faulted requests %d, rows retried %d)", fault.Hits(), retried)
	}
	var pending int
	_ = pool.QueryRow(ctx, "SELECT count(*) FROM journey_matcher.outbox WHERE NOT published").Scan(&pending)
	if pending != 0 {
		t.Fatalf("%d rows still pending", pending)
	}
}
