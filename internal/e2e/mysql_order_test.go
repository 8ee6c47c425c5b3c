package e2e

import (
	"context"
	"encoding/json"
	"fmt"
	"math/rand/v2"
	"sync"
	"testing"
	"time"

	"github.com/twmb/franz-go/pkg/kerr"
	"github.com/twmb/franz-go/pkg/kfake"
	"github.com/twmb/franz-go/pkg/kmsg"

	"github.com/outbox-relay/outbox-relay/internal/config"
	"github.com/outbox-relay/outbox-relay/internal/mytest"
)

// TestMariaDBPerKeyOrderWithFailures writes seed 004 rows for 300 keys on
// MariaDB while the broker fails a share of produce requests, so the relay
// retries rows itself with backoff kept in its tables. Every event arrives,
// and per key first arrivals follow the order the key's rows were written.
func TestMariaDBPerKeyOrderWithFailures(t *testing.T) {
	t.Parallel()
	const (
		keys      = 300
		perKey    = 10
		producers = 3
		topic     = "orders"
	)
	ctx := context.Background()
	name, dsn := mytest.NewDatabase(t, "e2e_order")
	db := openMySQL(t, dsn)
	mytest.Exec(t, db, seed004MySQL)
	c := kafkaCluster(t, kfake.SeedTopics(8, topic))
	brokers := c.ListenAddrs()
	var mu sync.Mutex
	rng := rand.New(rand.NewPCG(3, 4))
	fault := c.Fault(kfake.Fault{
		Keys: []kmsg.Key{kmsg.Produce}, Err: kerr.NotEnoughReplicas, Count: -1,
		When: func(kmsg.Request) bool {
			mu.Lock()
			defer mu.Unlock()
			return rng.Float64() < 0.15
		},
	})
	col := collect(t, brokers, topic)
	manage := false
	cfg := mysqlConfig(t, dsn, brokers, config.Source{
		Name: "orders", Table: name + ".kafka_outbox", Preset: "kafka-outbox", ManageTable: &manage, BatchSize: 100, Pipeline: 3,
		MaxAttempts: 1000, Backoff: config.Backoff{Initial: config.Duration(5 * time.Millisecond), Max: config.Duration(50 * time.Millisecond)},
	})
	s := cfg.Sinks["kafka"]
	s.RecordRetries = 1
	s.DeliveryTimeout = config.Duration(2 * time.Second)
	cfg.Sinks["kafka"] = s
	stop := runRelay(t, cfg)

	var wg sync.WaitGroup
	for p := range producers {
		wg.Go(func() {
			for seq := range perKey {
				for k := p; k < keys; k += producers * 10 {
					tx, err := db.BeginTx(ctx, nil)
					if err != nil {
						t.Error(err)
						return
					}
					for j := k; j < min(k+producers*10, keys); j += producers {
						payload := fmt.Sprintf(`{"key": %d, "seq": %d}`, j, seq)
						if _, err := tx.ExecContext(ctx, "INSERT INTO kafka_outbox (topic, `key`, payload_json) VALUES (?, ?, ?)",
							topic, fmt.Sprintf("key-%d", j), payload); err != nil {
							t.Error(err)
						}
					}
					if err := tx.Commit(); err != nil {
						t.Error(err)
						return
					}
				}
			}
		})
	}
	wg.Wait()
	total := keys * perKey
	recs := col.waitDistinct(t, total, 120*time.Second)
	stop()
	fault.Remove()

	next := make([]int, keys)
	seen := map[[2]int]bool{}
	for _, r := range recs {
		var p struct{ Key, Seq int }
		if err := json.Unmarshal(r.Value, &p); err != nil {
			t.Fatal(err)
		}
		if seen[[2]int{p.Key, p.Seq}] {
			continue
		}
		seen[[2]int{p.Key, p.Seq}] = true
		if p.Seq != next[p.Key] {
			for _, q := range recs {
				var pp struct{ Key, Seq int }
				_ = json.Unmarshal(q.Value, &pp)
				if pp.Key == p.Key {
					id, _ := header(q, "event_id")
					t.Logf("key %d: seq %d (event %s) at partition %d offset %d, %s", pp.Key, pp.Seq, id, q.Partition, q.Offset, q.Timestamp.Format("15:04:05.000000"))
				}
			}
			t.Fatalf("key %d: event %d arrived before event %d", p.Key, p.Seq, next[p.Key])
		}
		next[p.Key]++
	}
	for k, n := range next {
		if n != perKey {
			t.Fatalf("key %d: %d of %d events arrived", k, n, perKey)
		}
	}
	var retried int64
	if err := db.QueryRowContext(ctx, "SELECT total_events_retried FROM "+cfg.RelaySchema+".relay_state WHERE source = 'orders'").Scan(&retried); err != nil {
		t.Fatal(err)
	}
	t.Logf("%d events: %d produce requests failed, %d rows retried by the relay", total, fault.Hits(), retried)
	if fault.Hits() == 0 || retried == 0 {
		t.Fatalf("the failure path was not exercised (faulted requests %d, rows retried %d)", fault.Hits(), retried)
	}
	var pending int
	_ = db.QueryRowContext(ctx, "SELECT COUNT(*) FROM kafka_outbox WHERE push_completed_at IS NULL").Scan(&pending)
	if pending != 0 {
		t.Fatalf("%d rows still pending", pending)
	}
}
