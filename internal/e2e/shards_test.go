package e2e

import (
	"context"
	"fmt"
	"slices"
	"sync"
	"testing"
	"time"

	"github.com/twmb/franz-go/pkg/kfake"

	"github.com/outbox-relay/outbox-relay/internal/app"
	"github.com/outbox-relay/outbox-relay/internal/config"
	"github.com/outbox-relay/outbox-relay/internal/fixtures"
	"github.com/outbox-relay/outbox-relay/internal/mytest"
	"github.com/outbox-relay/outbox-relay/internal/pgtest"
	"github.com/outbox-relay/outbox-relay/internal/source"
)

// TestShards relays one source split into 4 buckets (shards: 4) while
// events are written for 200 keys: every event arrives once, per key in the
// order it was written; each bucket is held under its own lease
// (orders/0 ... orders/3, none named after the whole source), every bucket
// has keys of the test, and status reports the source relayed with its
// buckets' leases.
func TestShards(t *testing.T) {
	t.Parallel()
	const (
		keys      = 200
		perKey    = 15
		producers = 4
		shards    = 4
	)
	ctx := context.Background()
	dsn, pool := pgtest.NewDB(t)
	pgtest.Exec(t, pool, fixtures.Seed000)
	c := kafkaCluster(t, kfake.SeedTopics(8, "journey.created"))
	brokers := c.ListenAddrs()
	col := collect(t, brokers, "journey.created")
	cfg := baseConfig(dsn, brokers, config.Source{
		Name: "orders", Table: "journey_matcher.outbox", Preset: "published-flag", BatchSize: 50, Pipeline: 2, Shards: shards,
	})
	a, stop := runApp(t, cfg, app.WithStatsInterval(100*time.Millisecond))

	aggs := make([]string, keys)
	perBucket := make([]int, shards)
	for i := range aggs {
		aggs[i] = fmt.Sprintf("00000000-0000-0000-0000-%012d", i)
		perBucket[source.BucketOf(aggs[i], shards)]++
	}
	if slices.Contains(perBucket, 0) {
		t.Fatalf("keys per bucket %v: every bucket must have keys of the test", perBucket)
	}
	// Each producer owns a slice of the keys and writes each key's events
	// in order, several keys per transaction, while the relay runs.
	var wg sync.WaitGroup
	for p := range producers {
		wg.Go(func() {
			for seq := range perKey {
				tx, err := pool.Begin(ctx)
				if err != nil {
					t.Error(err)
					return
				}
				for k := p; k < keys; k += producers {
					if _, err := tx.Exec(ctx, `INSERT INTO journey_matcher.outbox (aggregate_id, aggregate_type, event_type, payload, correlation_id, created_at)
VALUES ($1, 'journey', 'journey.created', jsonb_build_object('key', $2::int, 'seq', $3::int), gen_random_uuid(), clock_timestamp())`,
						aggs[k], k, seq); err != nil {
						t.Error(err)
					}
				}
				if err := tx.Commit(ctx); err != nil {
					t.Error(err)
					return
				}
			}
		})
	}
	wg.Wait()
	run := keyOrderRun{keys: keys, perKey: perKey, deadLetters: func() (map[[2]int]string, error) {
		rows, err := pool.Query(ctx, "SELECT (payload->>'key')::int, (payload->>'seq')::int, failure_reason FROM outbox_relay.failed_events")
		if err != nil {
			return nil, err
		}
		defer rows.Close()
		return scanDeadLetters(rows.Scan, rows.Next, rows.Err)
	}}
	dups, dead := run.await(t, col, 60*time.Second)
	if dups != 0 || dead != 0 {
		t.Errorf("%d duplicates and %d dead letters, want every event once", dups, dead)
	}

	var leases []string
	rows, err := pool.Query(ctx, "SELECT shard FROM outbox_relay.leases WHERE shard = 'orders' OR shard LIKE 'orders/%' ORDER BY shard")
	if err != nil {
		t.Fatal(err)
	}
	for rows.Next() {
		var s string
		if err := rows.Scan(&s); err != nil {
			t.Fatal(err)
		}
		leases = append(leases, s)
	}
	if err := rows.Err(); err != nil {
		t.Fatal(err)
	}
	if want := []string{"orders/0", "orders/1", "orders/2", "orders/3"}; !slices.Equal(leases, want) {
		t.Errorf("leases %v, want one a bucket %v", leases, want)
	}
	waitFor(t, 20*time.Second, "status to show the source relayed under its buckets' leases", func() (bool, string) {
		st, err := a.Status(ctx)
		if err != nil || len(st) != 1 {
			return false, fmt.Sprint(st, err)
		}
		s := st[0]
		return s.Held && len(s.Shards) == shards && s.Stuck == "" && s.State == app.StateRelaying, fmt.Sprintf("%+v", s)
	})
	// The process relays every bucket: the per-bucket gauge says so.
	for i := range shards {
		if v := gathered(t, a, "outbox_relay_shard_relaying", "shard", fmt.Sprintf("orders/%d", i)); v != 1 {
			t.Errorf("outbox_relay_shard_relaying{shard=orders/%d} = %v, want 1", i, v)
		}
	}
	stop()
	t.Logf("%d events over %d keys, keys per bucket %v", keys*perKey, keys, perBucket)
}

// TestShardsOnMariaDB relays a kafka_outbox table on MariaDB split into 3
// buckets: every event arrives once, per key in order, under the buckets'
// leases, and status reports the source relayed.
func TestShardsOnMariaDB(t *testing.T) {
	t.Parallel()
	const keys, perKey, shards = 60, 10, 3
	ctx := context.Background()
	name, dsn := mytest.NewDatabase(t, "e2e_shards")
	c := kafkaCluster(t, kfake.SeedTopics(4, "orders"))
	col := collect(t, c.ListenAddrs(), "orders")
	cfg := mysqlConfig(t, dsn, c.ListenAddrs(), config.Source{Name: "kafka-outbox", Table: name + ".kafka_outbox",
		Preset: "kafka-outbox", BatchSize: 20, Shards: shards})
	a, _ := runApp(t, cfg, app.WithStatsInterval(100*time.Millisecond))
	db := openMySQL(t, dsn)
	waitFor(t, 20*time.Second, "the relay's table", func() (bool, string) {
		_, err := db.ExecContext(ctx, "SELECT 1 FROM kafka_outbox LIMIT 1")
		return err == nil, fmt.Sprint(err)
	})
	for seq := range perKey {
		for k := range keys {
			if _, err := db.ExecContext(ctx, "INSERT INTO kafka_outbox (topic, `key`, payload_json) VALUES ('orders', ?, ?)",
				fmt.Sprintf("key-%d", k), fmt.Sprintf(`{"key": %d, "seq": %d}`, k, seq)); err != nil {
				t.Fatal(err)
			}
		}
	}
	run := keyOrderRun{keys: keys, perKey: perKey, deadLetters: func() (map[[2]int]string, error) { return nil, nil }}
	if dups, _ := run.await(t, col, 60*time.Second); dups != 0 {
		t.Errorf("%d duplicates, want every event once", dups)
	}
	waitFor(t, 20*time.Second, "status to show the source relayed under its buckets' leases", func() (bool, string) {
		st, err := a.Status(ctx)
		if err != nil || len(st) != 1 {
			return false, fmt.Sprint(st, err)
		}
		s := st[0]
		return s.Held && len(s.Shards) == shards && s.Shards[2].Lease == "kafka-outbox/2" && s.State == app.StateRelaying,
			fmt.Sprintf("%+v", s)
	})
}
