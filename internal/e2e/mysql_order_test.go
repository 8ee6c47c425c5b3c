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
	"github.com/outbox-relay/outbox-relay/internal/mytest"
)

// TestMariaDBPerKeyOrderWithFailures writes seed 004 rows for 300 keys on
// MariaDB while the broker fails a share of produce requests, so the relay
// retries rows itself with backoff kept in its tables. Every event arrives
// (or is dead-lettered as overtaken in the client, see keyOrderRun), and
// per key first arrivals follow the order the key's rows were written.
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
	// A call the faulty broker leaves unanswered is cut after 5 s, not the
	// default 35 s: under load such calls opened the circuit for longer
	// than the test waits, which is not what it is about.
	s.Timeout = config.Duration(5 * time.Second)
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
	run := keyOrderRun{keys: keys, perKey: perKey, deadLetters: func() (map[[2]int]string, error) {
		rows, err := db.QueryContext(ctx, "SELECT CAST(JSON_VALUE(payload, '$.key') AS SIGNED), CAST(JSON_VALUE(payload, '$.seq') AS SIGNED), failure_reason FROM "+
			cfg.RelaySchema+".failed_events")
		if err != nil {
			return nil, err
		}
		defer rows.Close()
		return scanDeadLetters(rows.Scan, rows.Next, rows.Err)
	}}
	dups, dead := run.await(t, col, 120*time.Second)
	stop()
	fault.Remove()
	var retried int64
	if err := db.QueryRowContext(ctx, "SELECT total_events_retried FROM "+cfg.RelaySchema+".relay_state WHERE source = 'orders'").Scan(&retried); err != nil {
		t.Fatal(err)
	}
	t.Logf("%d events: %d produce requests failed, %d rows retried by the relay, %d duplicates, %d overtaken and dead-lettered",
		total, fault.Hits(), retried, dups, dead)
	if fault.Hits() == 0 || retried == 0 {
		t.Fatalf("the failure path was not exercised (faulted requests %d, rows retried %d)", fault.Hits(), retried)
	}
	var pending int
	_ = db.QueryRowContext(ctx, "SELECT COUNT(*) FROM kafka_outbox WHERE push_completed_at IS NULL").Scan(&pending)
	if pending != 0 {
		t.Fatalf("%d rows still pending", pending)
	}
}
