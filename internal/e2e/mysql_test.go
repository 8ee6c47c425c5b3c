package e2e

import (
	"context"
	"database/sql"
	"fmt"
	"strings"
	"testing"
	"time"

	"github.com/twmb/franz-go/pkg/kfake"

	"github.com/outbox-relay/outbox-relay/internal/config"
	"github.com/outbox-relay/outbox-relay/internal/mytest"
	"github.com/outbox-relay/outbox-relay/internal/source"
)

// seed004MySQL is seed 004's kafka_outbox as a MySQL/MariaDB table.
const seed004MySQL = `CREATE TABLE kafka_outbox (
  id BIGINT UNSIGNED NOT NULL AUTO_INCREMENT PRIMARY KEY,
  batch_id VARCHAR(36) NULL,
  push_started_at DATETIME(6) NULL,
  push_completed_at DATETIME(6) NULL,
  topic VARCHAR(255) NOT NULL,
  payload_json LONGTEXT NOT NULL,
  payload_headers TEXT NOT NULL DEFAULT '',
  push_attempts INT NOT NULL DEFAULT 0,
  ` + "`key`" + ` VARCHAR(255) NOT NULL DEFAULT '',
  partition_key VARCHAR(255) NOT NULL DEFAULT '',
  errored TINYINT NOT NULL DEFAULT 0,
  error_reason TEXT NOT NULL DEFAULT '',
  created_at DATETIME(6) NOT NULL DEFAULT CURRENT_TIMESTAMP(6),
  KEY push_completed_at (push_completed_at)
)`

// mysqlConfig is a relay configuration for one MariaDB database, with a
// relay database of the test's own (tests share the server).
func mysqlConfig(t *testing.T, dsn string, brokers []string, sources ...config.Source) *config.Config {
	t.Helper()
	relayDB := "relay_" + mytest.Suffix()
	t.Cleanup(func() { mytest.Drop(t, relayDB) })
	cfg := &config.Config{
		RelaySchema: relayDB,
		Admin:       config.Admin{Listen: "off"},
		Databases:   map[string]config.Database{"main": {Driver: "mysql", DSN: dsn}},
		Sinks:       map[string]config.Sink{"kafka": {Type: "kafka", Brokers: brokers}},
		Sources:     sources,
		Shutdown:    config.Shutdown{Timeout: config.Duration(5 * time.Second)},
		LeaseTTL:    config.Duration(2 * time.Second),
	}
	for i := range cfg.Sources {
		cfg.Sources[i].Poll = config.Poll{Min: config.Duration(10 * time.Millisecond), Max: config.Duration(100 * time.Millisecond)}
	}
	cfg.ApplyDefaults()
	if err := cfg.Validate(); err != nil {
		t.Fatal(err)
	}
	return cfg
}

func openMySQL(t *testing.T, dsn string) *sql.DB {
	t.Helper()
	db, err := sql.Open("mysql", dsn)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = db.Close() })
	return db
}

// TestSeed004OnMariaDB relays seed 004's table on MariaDB, created by the
// relay's own migrations: topic, key,
// partition by partition_key else key (as the Java client), payload_headers
// as Kafka headers; bad rows end errored with a readable error_reason and
// can be listed and replayed from the dead-letter table; the relay goes on.
func TestSeed004OnMariaDB(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	name, dsn := mytest.NewDatabase(t, "e2e_seed004")
	db := openMySQL(t, dsn)
	c := kafkaCluster(t, kfake.SeedTopics(3, "orders", "payments"))
	brokers := c.ListenAddrs()
	cfg := mysqlConfig(t, dsn, brokers, config.Source{Name: "kafka-outbox", Table: name + ".kafka_outbox",
		Preset: "kafka-outbox"})
	col := collect(t, brokers, "orders", "payments")
	a, _ := runApp(t, cfg) // migrates: the table is the relay's to create
	insert := func(topic, key, pkey, payload, headers string) string {
		t.Helper()
		res, err := db.ExecContext(ctx, "INSERT INTO kafka_outbox (topic, `key`, partition_key, payload_json, payload_headers) VALUES (?, ?, ?, ?, ?)",
			topic, key, pkey, payload, headers)
		if err != nil {
			t.Fatal(err)
		}
		id, _ := res.LastInsertId()
		return fmt.Sprint(id)
	}
	o1 := insert("orders", "customer-1", "", `{"order": 1}`, `{"trace_id": "t-1"}`)
	o2 := insert("orders", "customer-2", "region-eu", `{"order": 2, "name": "Café"}`, "")
	badJSON := insert("orders", "customer-9", "", `{"order": `, "")
	noTopic := insert("", "customer-9", "", `{"order": 6}`, "")
	p3 := insert("payments", "", "", `{"payment": 3}`, "")
	after := insert("orders", "customer-9", "", `{"order": 9}`, "")

	got := distinct(col.waitDistinct(t, 4, 30*time.Second))
	check := func(id, topic, key string, partitionKey string) {
		t.Helper()
		r := got[id]
		if r == nil {
			t.Fatalf("event %s did not arrive (got %d events)", id, len(got))
		}
		if r.Topic != topic || string(r.Key) != key {
			t.Errorf("event %s: topic %s key %q, want %s %q", id, r.Topic, r.Key, topic, key)
		}
		if partitionKey != "" {
			if want := javaPartition([]byte(partitionKey), 3); r.Partition != want {
				t.Errorf("event %s: partition %d, want %d (murmur2 of %q)", id, r.Partition, want, partitionKey)
			}
		}
	}
	check(o1, "orders", "customer-1", "customer-1")
	check(o2, "orders", "customer-2", "region-eu")
	check(p3, "payments", "", "")
	check(after, "orders", "customer-9", "customer-9")
	if v, _ := header(got[o1], "trace_id"); v != "t-1" {
		t.Errorf("payload_headers: trace_id header = %q", v)
	}
	if string(got[o2].Value) != `{"order": 2, "name": "Café"}` {
		t.Errorf("payload %q", got[o2].Value)
	}

	waitFor(t, 20*time.Second, "rows completed", func() (bool, string) {
		var done, errored int
		_ = db.QueryRowContext(ctx, `SELECT SUM(push_completed_at IS NOT NULL), SUM(errored = 1) FROM kafka_outbox`).Scan(&done, &errored)
		return done == 4 && errored == 2, fmt.Sprintf("%d completed, %d errored", done, errored)
	})
	reasons := map[string]string{}
	rows, err := db.QueryContext(ctx, `SELECT CAST(id AS CHAR), error_reason FROM kafka_outbox WHERE errored = 1`)
	if err != nil {
		t.Fatal(err)
	}
	for rows.Next() {
		var id, reason string
		if err := rows.Scan(&id, &reason); err != nil {
			t.Fatal(err)
		}
		reasons[id] = reason
	}
	rows.Close()
	if !strings.Contains(reasons[badJSON], "not valid JSON") || !strings.Contains(reasons[noTopic], "missing topic") {
		t.Errorf("error_reason: %q", reasons)
	}

	// The dead letters are listed, and a replay puts a fixed row back.
	failed, err := a.ListFailed(ctx, "main", source.DLQFilter{})
	if err != nil {
		t.Fatal(err)
	}
	if len(failed) != 2 {
		t.Fatalf("dead letters: %+v, want 2", failed)
	}
	mytest.Exec(t, db, `UPDATE kafka_outbox SET payload_json = '{"order": 5}' WHERE id = `+badJSON)
	srcs, err := a.Resolve(ctx)
	if err != nil {
		t.Fatal(err)
	}
	var fixed []source.FailedEvent
	for _, f := range failed {
		if f.OriginalEventID == badJSON {
			fixed = append(fixed, f)
		}
	}
	if n, err := srcs[0].Replay(ctx, fixed, "test"); err != nil || n != 1 {
		t.Fatalf("replay: %d, %v", n, err)
	}
	col.waitDistinct(t, 5, 30*time.Second)
	waitFor(t, 20*time.Second, "the replayed row published", func() (bool, string) {
		var done int
		_ = db.QueryRowContext(ctx, `SELECT COUNT(*) FROM kafka_outbox WHERE id = `+badJSON+` AND push_completed_at IS NOT NULL AND errored = 0`).Scan(&done)
		return done == 1, fmt.Sprint(done)
	})
}
