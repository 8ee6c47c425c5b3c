package cli_test

import (
	"context"
	"database/sql"
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/twmb/franz-go/pkg/kfake"

	"github.com/outbox-relay/outbox-relay/internal/mytest"
)

// myJourneys is seed 000's service outbox on MySQL/MariaDB.
const myJourneys = `CREATE TABLE outbox (
  id CHAR(36) NOT NULL PRIMARY KEY,
  aggregate_id CHAR(36) NOT NULL,
  aggregate_type VARCHAR(100) NOT NULL,
  event_type VARCHAR(100) NOT NULL,
  payload JSON NOT NULL,
  published BOOLEAN NOT NULL DEFAULT FALSE,
  published_at DATETIME(6) NULL,
  created_at DATETIME(6) NOT NULL DEFAULT CURRENT_TIMESTAMP(6),
  KEY idx_outbox_created (created_at)
)`

// myEnv makes a MariaDB database with the journeys outbox and a config for
// it with a relay database of its own; extra is appended to the source.
func myEnv(t *testing.T, brokers, extra string) (*sql.DB, string, string) {
	t.Helper()
	name, dsn := mytest.NewDatabase(t, "cli_ret")
	relayDB := "relay_" + mytest.Suffix()
	t.Cleanup(func() { mytest.Drop(t, relayDB) })
	db, err := sql.Open("mysql", dsn+"?parseTime=true")
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = db.Close() })
	mytest.Exec(t, db, myJourneys)
	p := filepath.Join(t.TempDir(), "relay.yaml")
	cfg := fmt.Sprintf(`log: {level: warn, format: text}
admin: {listen: "off"}
shutdown: {timeout: 5s}
relay_schema: %s
lease_ttl: 3s
databases:
  main:
    driver: mysql
    dsn: %q
sinks:
  kafka:
    type: kafka
    brokers: [%q]
sources:
  - name: jm
    table: %s.outbox
    preset: published-flag
    poll: {min: 5ms, max: 50ms}
%s`, relayDB, dsn, brokers, name, extra)
	if err := os.WriteFile(p, []byte(cfg), 0o600); err != nil {
		t.Fatal(err)
	}
	cliOK(t, "--config", p, "migrate", "up")
	return db, p, relayDB
}

// myInsert inserts n journeys created `created` ago; published ones were
// published `published` ago.
func myInsert(t *testing.T, db *sql.DB, n int, created, published time.Duration, isPublished bool) {
	t.Helper()
	var pubAt any
	if isPublished {
		pubAt = published.Microseconds()
	}
	_, err := db.ExecContext(context.Background(), `INSERT INTO outbox (id, aggregate_id, aggregate_type, event_type, payload, created_at, published, published_at)
SELECT UUID(), UUID(), 'journey', 'journey.created', JSON_OBJECT('n', seq), UTC_TIMESTAMP(6) - INTERVAL ? MICROSECOND, ?,
  UTC_TIMESTAMP(6) - INTERVAL ? MICROSECOND FROM seq_1_to_`+fmt.Sprint(n), created.Microseconds(), isPublished, pubAt)
	if err != nil {
		t.Fatal(err)
	}
}

func myCount(t *testing.T, db *sql.DB, q string, args ...any) int {
	t.Helper()
	var n int
	if err := db.QueryRowContext(context.Background(), q, args...).Scan(&n); err != nil {
		t.Fatalf("%s: %v", q, err)
	}
	return n
}

// TestRetentionCommandMySQL: on MariaDB the retention command counts in a
// dry run, deletes old delivered rows in batches, dead letters only with
// --include-dead, and optimize rebuilds the table.
func TestRetentionCommandMySQL(t *testing.T) {
	t.Parallel()
	db, cfg, relayDB := myEnv(t, "127.0.0.1:1", "")
	const month, hour = 30 * 24 * time.Hour, time.Hour
	myInsert(t, db, 50, month, month, true) // old and delivered: deleted
	myInsert(t, db, 5, hour, hour, true)    // delivered an hour ago: kept
	myInsert(t, db, 5, month, 0, false)     // old but pending: kept
	myInsert(t, db, 2, month, 0, false)     // old dead letters, below
	mytest.Exec(t, db, `INSERT INTO `+relayDB+`.failed_events (original_event_id, source, source_schema, source_table, failure_reason)
SELECT id, 'jm', DATABASE(), 'outbox', 'rejected' FROM outbox WHERE NOT published ORDER BY id LIMIT 2`,
		`UPDATE outbox SET published = TRUE WHERE id IN (SELECT original_event_id FROM `+relayDB+`.failed_events)`)
	total := func() int { return myCount(t, db, "SELECT COUNT(*) FROM outbox") }

	out := cliOK(t, "--config", cfg, "retention", "--older-than", "7d", "--include-dead", "--dry-run")
	if l := sourceLine(t, out, "jm"); !strings.Contains(l, "would delete 50 published, 2 dead") {
		t.Errorf("dry run: %q", l)
	}
	if n := total(); n != 62 {
		t.Fatalf("dry run left %d rows, want all 62", n)
	}
	out = cliOK(t, "--config", cfg, "retention", "--older-than", "168h", "--batch-size", "8", "--pause", "1ms")
	if l := sourceLine(t, out, "jm"); !strings.Contains(l, "deleted 50 published, 0 dead in 7 batch(es)") {
		t.Errorf("retention: %q", l)
	}
	if n := total(); n != 12 {
		t.Errorf("%d rows left, want 12 (5 recent, 5 pending, 2 dead letters)", n)
	}
	if n := myCount(t, db, "SELECT COUNT(*) FROM outbox WHERE NOT published"); n != 5 {
		t.Errorf("%d pending rows left, want 5", n)
	}
	out = cliOK(t, "--config", cfg, "retention", "--older-than", "7d", "--include-dead")
	if l := sourceLine(t, out, "jm"); !strings.Contains(l, "deleted 0 published, 2 dead") {
		t.Errorf("retention --include-dead: %q", l)
	}
	if n := total(); n != 10 {
		t.Errorf("%d rows left, want 10", n)
	}
	out = cliOK(t, "--config", cfg, "optimize")
	if l := sourceLine(t, out, "jm"); !strings.Contains(l, "rebuilt and analyzed") || !strings.Contains(l, "free space") {
		t.Errorf("optimize: %q", l)
	}
}

// TestRelayAppliesRetentionMySQL: a MariaDB source with a retention block
// has the running relay delete its old delivered rows while it publishes
// new ones: every new row is published, none is dead-lettered, and exactly
// the old delivered rows go.
func TestRelayAppliesRetentionMySQL(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	c, err := kfake.NewCluster(kfake.NumBrokers(1), kfake.SeedTopics(1, "journey.created"))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(c.Close)
	db, cfg, relayDB := myEnv(t, c.ListenAddrs()[0], "    retention: {older_than: 168h, interval: 1s}\n")
	const month = 30 * 24 * time.Hour
	myInsert(t, db, 600, month, month, true)       // old and delivered: deleted
	myInsert(t, db, 5, time.Hour, time.Hour, true) // recent: kept
	myInsert(t, db, 5, month, 0, false)            // old but pending: published now, then kept

	runCtx, stop := context.WithCancel(ctx)
	defer stop()
	done := make(chan error, 1)
	var runOut string
	go func() {
		var err error
		runOut, err = runCLI(runCtx, "--config", cfg, "run")
		done <- err
	}()
	// New rows arrive while the relay runs its retention.
	for range 20 {
		myInsert(t, db, 10, 0, 0, false)
		time.Sleep(10 * time.Millisecond)
	}
	waitFor(t, 60*time.Second, "the old delivered rows deleted and the rest published", func() (bool, string) {
		total := myCount(t, db, "SELECT COUNT(*) FROM outbox")
		pending := myCount(t, db, "SELECT COUNT(*) FROM outbox WHERE NOT published")
		return total == 210 && pending == 0, fmt.Sprintf("%d rows, %d pending; want 210, none pending", total, pending)
	})
	if n := myCount(t, db, "SELECT COUNT(*) FROM "+relayDB+".failed_events"); n != 0 {
		t.Errorf("%d rows dead-lettered beside the retention", n)
	}
	// Later old rows go at a later interval.
	myInsert(t, db, 7, month, month, true)
	waitFor(t, 30*time.Second, "the rows aged since deleted", func() (bool, string) {
		n := myCount(t, db, "SELECT COUNT(*) FROM outbox")
		return n == 210, fmt.Sprintf("%d rows, want 210", n)
	})
	stop()
	select {
	case err := <-done:
		if err != nil {
			t.Fatalf("run: %v\n%s", err, runOut)
		}
	case <-time.After(20 * time.Second):
		t.Fatal("run did not stop after its context was cancelled")
	}
}
