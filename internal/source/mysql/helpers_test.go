package mysql_test

import (
	"context"
	"database/sql"
	"testing"

	"github.com/outbox-relay/outbox-relay/internal/layout"
	"github.com/outbox-relay/outbox-relay/internal/mytest"
	"github.com/outbox-relay/outbox-relay/internal/source"
	"github.com/outbox-relay/outbox-relay/internal/source/mysql"
)

// env is one test's application database and relay database.
type env struct {
	dsn     string // names the application database
	appDB   string
	relayDB string
	db      *sql.DB // from mysql.Open
}

// newEnv creates an application database and a migrated relay database,
// both dropped when the test ends.
func newEnv(t testing.TB) *env {
	t.Helper()
	name, dsn := mytest.NewDatabase(t, "outbox_test")
	e := &env{dsn: dsn, appDB: name, relayDB: "outbox_relay_" + mytest.Suffix()}
	t.Cleanup(func() { mytest.Drop(t, e.relayDB) })
	m, err := mysql.NewMigrator(dsn, e.relayDB)
	if err != nil {
		t.Fatal(err)
	}
	defer m.Close()
	if err := m.Up(context.Background()); err != nil {
		t.Fatal(err)
	}
	e.db = e.open(t, mysql.ConnOptions{})
	return e
}

func (e *env) open(t testing.TB, o mysql.ConnOptions) *sql.DB {
	t.Helper()
	db, err := mysql.OpenWith(e.dsn, o)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = db.Close() })
	return db
}

func (e *env) exec(t testing.TB, stmts ...string) {
	t.Helper()
	mytest.Exec(t, e.db, stmts...)
}

// store resolves a layout against table and builds its store on db.
func (e *env) store(t testing.TB, db *sql.DB, name, table, preset string, over layout.Spec, ordering bool) (*mysql.Store, *layout.Layout) {
	t.Helper()
	merged, explicit, err := layout.Merge(preset, over, "")
	if err != nil {
		t.Fatal(err)
	}
	tbl := mysql.Table{Name: table}
	cols, err := mysql.Columns(context.Background(), db, tbl)
	if err != nil {
		t.Fatal(err)
	}
	l, err := layout.Resolve(merged, explicit, tbl.String(), cols)
	if err != nil {
		t.Fatal(err)
	}
	opts := mysql.Options{Source: name, Table: tbl, RelayDatabase: e.relayDB, Layout: l, Ordering: ordering}
	if err := opts.Validate(); err != nil {
		t.Fatal(err)
	}
	return mysql.New(db, opts), l
}

// indexedStore is e.store with the indexes the relay picks for the table
// (ClaimIndex, PendingIndex), ordering on.
func (e *env) indexedStore(t testing.TB, name, table, preset string) *mysql.Store {
	t.Helper()
	return e.indexedBucketStore(t, name, table, preset, source.Bucket{}, true)
}

// indexedBucketStore is indexedStore claiming bucket b only, with ordering
// on or off.
func (e *env) indexedBucketStore(t testing.TB, name, table, preset string, b source.Bucket, ordering bool) *mysql.Store {
	t.Helper()
	return e.indexedStoreWith(t, name, table, preset, mysql.Options{Bucket: b, Ordering: ordering})
}

// priorityStore is indexedStore under the event priority prio (none when
// nil).
func (e *env) priorityStore(t testing.TB, table, preset string, prio *source.Priority) *mysql.Store {
	t.Helper()
	return e.indexedStoreWith(t, "bench", table, preset, mysql.Options{Ordering: true, Priority: prio})
}

// indexedStoreWith is indexedStore with o's ordering, bucket and priority.
func (e *env) indexedStoreWith(t testing.TB, name, table, preset string, o mysql.Options) *mysql.Store {
	t.Helper()
	ctx := context.Background()
	merged, explicit, err := layout.Merge(preset, layout.Spec{}, "")
	if err != nil {
		t.Fatal(err)
	}
	tbl := mysql.Table{Name: table}
	cols, err := mysql.Columns(ctx, e.db, tbl)
	if err != nil {
		t.Fatal(err)
	}
	l, err := layout.Resolve(merged, explicit, tbl.String(), cols)
	if err != nil {
		t.Fatal(err)
	}
	claim, err := mysql.ClaimIndex(ctx, e.db, tbl, l)
	if err != nil {
		t.Fatal(err)
	}
	pending, err := mysql.PendingIndex(ctx, e.db, tbl, l)
	if err != nil {
		t.Fatal(err)
	}
	opts := mysql.Options{Source: name, Table: tbl, RelayDatabase: e.relayDB, Layout: l, Ordering: o.Ordering,
		ClaimIndex: claim, PendingIndex: pending, Bucket: o.Bucket, Priority: o.Priority}
	if err := opts.Validate(); err != nil {
		t.Fatal(err)
	}
	return mysql.New(e.db, opts)
}

func ids(rows []source.Row) []string {
	var out []string
	for _, r := range rows {
		out = append(out, r.ID)
	}
	return out
}

func all(b source.Batch) []int {
	var out []int
	for i := range b.Rows() {
		out = append(out, i)
	}
	return out
}

func queryInt(t testing.TB, db *sql.DB, q string, args ...any) int {
	t.Helper()
	var n int
	if err := db.QueryRowContext(context.Background(), q, args...).Scan(&n); err != nil {
		t.Fatalf("%s: %v", q, err)
	}
	return n
}

// kafkaOutbox is seed 004's table as MySQL DDL.
const kafkaOutbox = `CREATE TABLE kafka_outbox (
  id BIGINT UNSIGNED NOT NULL AUTO_INCREMENT PRIMARY KEY,
  batch_id VARCHAR(36) NULL,
  push_started_at DATETIME(6) NULL,
  push_completed_at DATETIME(6) NULL,
  topic VARCHAR(255) NOT NULL,
  payload_json TEXT NOT NULL,
  payload_headers TEXT NOT NULL DEFAULT '',
  push_attempts INT NOT NULL DEFAULT 0,
  ` + "`key`" + ` VARCHAR(255) NOT NULL DEFAULT '',
  partition_key VARCHAR(255) NOT NULL DEFAULT '',
  errored TINYINT NOT NULL DEFAULT 0,
  error_reason VARCHAR(2000) NOT NULL DEFAULT '',
  created_at DATETIME(6) NOT NULL DEFAULT CURRENT_TIMESTAMP(6),
  KEY idx_push_completed_at (push_completed_at)
)`

// kafkaLayout maps kafka_outbox: delivered when push_completed_at is set,
// the partition key falling back to the key.
var kafkaLayout = layout.Spec{
	ID: "id", Payload: "payload_json", PayloadFormat: "json",
	Topic: "{topic}", Key: "{key}", PartitionKey: "{partition_key}", Headers: "payload_headers",
	CreatedAt: "created_at", OrderBy: "id", RetryCount: "push_attempts", Error: "error_reason",
	State: layout.State{Mode: "timestamp", PublishedAt: []string{"push_completed_at"}},
}
