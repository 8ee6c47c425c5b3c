package mysql_test

import (
	"context"
	"maps"
	"slices"
	"strings"
	"testing"
	"time"
	"unicode/utf8"

	"github.com/outbox-relay/outbox-relay/internal/layout"
	"github.com/outbox-relay/outbox-relay/internal/source"
	"github.com/outbox-relay/outbox-relay/internal/source/mysql"
)

// TestManagedTableMigrations checks that the relay creates kafka_outbox as
// seed 004 documents it in MySQL's types, with its version table beside it,
// and that running the migrations again changes nothing.
func TestManagedTableMigrations(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	e := newEnv(t)
	tbl := mysql.Table{Schema: e.appDB, Name: "kafka_outbox"}
	for range 2 {
		if err := mysql.MigrateTable(ctx, e.dsn, tbl); err != nil {
			t.Fatal(err)
		}
	}
	type column struct{ typ, null, def string }
	rows, err := e.db.QueryContext(ctx, `SELECT COLUMN_NAME, LOWER(COLUMN_TYPE), IS_NULLABLE, COALESCE(COLUMN_DEFAULT, 'none')
FROM information_schema.COLUMNS WHERE TABLE_SCHEMA = ? AND TABLE_NAME = 'kafka_outbox'`, e.appDB)
	if err != nil {
		t.Fatal(err)
	}
	got := map[string]column{}
	for rows.Next() {
		var name string
		var c column
		if err := rows.Scan(&name, &c.typ, &c.null, &c.def); err != nil {
			t.Fatal(err)
		}
		c.typ = strings.ReplaceAll(strings.ReplaceAll(c.typ, "(20)", ""), "(11)", "") // display widths differ by server
		c.typ = strings.ReplaceAll(c.typ, "(4)", "")
		got[name] = c
	}
	_ = rows.Close()
	want := map[string]column{
		"id":                {"bigint unsigned", "NO", "none"},
		"batch_id":          {"varchar(36)", "YES", "NULL"},
		"push_started_at":   {"datetime(6)", "YES", "NULL"},
		"push_completed_at": {"datetime(6)", "YES", "NULL"},
		"topic":             {"varchar(255)", "NO", "none"},
		"payload_json":      {"longtext", "NO", "none"},
		"payload_headers":   {"text", "NO", "''"},
		"push_attempts":     {"int", "NO", "0"},
		"key":               {"varchar(255)", "NO", "''"},
		"partition_key":     {"varchar(255)", "NO", "''"},
		"errored":           {"tinyint", "NO", "0"},
		"error_reason":      {"text", "NO", "''"},
		"created_at":        {"datetime(6)", "NO", "current_timestamp(6)"},
	}
	if !maps.Equal(got, want) {
		for _, k := range slices.Sorted(maps.Keys(want)) {
			if got[k] != want[k] {
				t.Errorf("column %s: %+v, want %+v", k, got[k], want[k])
			}
		}
		if len(got) != len(want) {
			t.Errorf("columns %v", slices.Sorted(maps.Keys(got)))
		}
	}
	if n := queryInt(t, e.db, `SELECT COUNT(*) FROM information_schema.STATISTICS WHERE TABLE_SCHEMA = ? AND TABLE_NAME = 'kafka_outbox'
  AND INDEX_NAME = 'kafka_outbox_push_completed_at_idx' AND COLUMN_NAME = 'push_completed_at' AND SEQ_IN_INDEX = 1`, e.appDB); n != 1 {
		t.Errorf("index on push_completed_at: %d columns", n)
	}
	m, err := mysql.NewTableMigrator(e.dsn, tbl)
	if err != nil {
		t.Fatal(err)
	}
	defer m.Close()
	st, err := m.Status(ctx)
	if err != nil || len(st) < 2 {
		t.Fatalf("status %+v, %v; want the table's migrations", st, err)
	}
	for _, s := range st {
		if !s.Applied {
			t.Errorf("migration %d not applied", s.Version)
		}
	}
	if n := queryInt(t, e.db, "SELECT COUNT(*) FROM kafka_outbox_goose_version WHERE version_id > 0"); n != len(st) {
		t.Errorf("version table beside the table holds %d applied versions, want %d", n, len(st))
	}
	// No relay table went into the application's database.
	if n := queryInt(t, e.db, "SELECT COUNT(*) FROM information_schema.TABLES WHERE TABLE_SCHEMA = ?", e.appDB); n != 2 {
		t.Errorf("%d tables in the application's database, want kafka_outbox and its version table", n)
	}
	// An application inserts with the public columns only.
	e.exec(t, `INSERT INTO kafka_outbox (topic, payload_json) VALUES ('t', '{}')`)
	if n := queryInt(t, e.db, "SELECT COUNT(*) FROM kafka_outbox WHERE payload_headers = '' AND error_reason = '' AND `key` = ''"); n != 1 {
		t.Error("the public-columns insert did not get '' defaults")
	}
	for _, bad := range []mysql.Table{{Name: "KafkaOutbox"}, {Name: strings.Repeat("k", 43)}, {Schema: "a-b", Name: "kafka_outbox"}} {
		if _, err := mysql.NewTableMigrator(e.dsn, bad); err == nil {
			t.Errorf("managed table %+v accepted", bad)
		}
	}
}

// originalTable is the kafka_outbox of inviqa/kafka-outbox-relay's first
// MySQL migration: signed ids, JSON payload and headers, DATETIME without
// fractions, a VARCHAR(255) error_reason, no key columns yet.
const originalTable = `CREATE TABLE kafka_outbox (
  id BIGINT NOT NULL AUTO_INCREMENT PRIMARY KEY,
  batch_id CHAR(36) NULL,
  push_started_at DATETIME NULL,
  push_completed_at DATETIME NULL,
  topic VARCHAR(255) NOT NULL,
  payload_json JSON NOT NULL,
  payload_headers JSON NOT NULL,
  push_attempts TINYINT NOT NULL DEFAULT 0,
  errored TINYINT NOT NULL DEFAULT 0,
  error_reason VARCHAR(255) NOT NULL DEFAULT '',
  created_at DATETIME DEFAULT CURRENT_TIMESTAMP
)`

// TestManagedTableAdoptsOriginal checks that the table the original relay
// created is adopted with its rows, gains the columns and index it lacks,
// and that a long error fits its VARCHAR(255) error_reason.
func TestManagedTableAdoptsOriginal(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	e := newEnv(t)
	e.exec(t, originalTable, `CREATE INDEX outbox_batch_query ON kafka_outbox (batch_id, created_at)`,
		`INSERT INTO kafka_outbox (topic, payload_json, payload_headers) VALUES ('orders', '{"kept": true}', '{}'), ('orders', '{"n": 2}', '{}')`,
		`UPDATE kafka_outbox SET push_completed_at = UTC_TIMESTAMP(), batch_id = UUID() WHERE id = 2`)
	if err := mysql.MigrateTable(ctx, e.dsn, mysql.Table{Name: "kafka_outbox"}); err != nil {
		t.Fatal(err)
	}
	if n := queryInt(t, e.db, "SELECT COUNT(*) FROM kafka_outbox"); n != 2 {
		t.Fatalf("%d rows after adopting the table, want 2", n)
	}
	if n := queryInt(t, e.db, `SELECT COUNT(*) FROM information_schema.COLUMNS WHERE TABLE_SCHEMA = ? AND TABLE_NAME = 'kafka_outbox'
  AND COLUMN_NAME IN ('key', 'partition_key')`, e.appDB); n != 2 {
		t.Errorf("key columns after adoption: %d, want 2", n)
	}
	if n := queryInt(t, e.db, `SELECT COUNT(*) FROM information_schema.STATISTICS WHERE TABLE_SCHEMA = ? AND TABLE_NAME = 'kafka_outbox'
  AND COLUMN_NAME = 'push_completed_at' AND SEQ_IN_INDEX = 1`, e.appDB); n != 1 {
		t.Errorf("index on push_completed_at after adoption: %d", n)
	}
	st, _ := e.store(t, e.db, "orig", "kafka_outbox", "kafka-outbox", layout.Spec{}, true)
	b, err := st.Claim(ctx, 10)
	if err != nil || b == nil || len(b.Rows()) != 1 || b.Rows()[0].ID != "1" {
		t.Fatalf("claim on the adopted table: %v %v", b, err)
	}
	if p := string(b.Rows()[0].Payload); !strings.Contains(p, `"kept"`) {
		t.Errorf("payload %s", p)
	}
	long := strings.Repeat("é", 300) // 300 characters, 600 bytes
	if err := b.Complete(ctx, source.Outcome{Dead: []source.Dead{{Index: 0, Attempts: 1, Reason: long, PayloadIsJSON: true}}}); err != nil {
		t.Fatal(err)
	}
	var reason string
	if err := e.db.QueryRowContext(ctx, "SELECT error_reason FROM kafka_outbox WHERE id = 1").Scan(&reason); err != nil {
		t.Fatal(err)
	}
	if n := utf8.RuneCountInString(reason); n != 255 || !strings.HasSuffix(reason, "...") || !strings.HasPrefix(reason, "éé") {
		t.Errorf("error_reason of %d characters %q, want the reason cut to 255 with ...", n, reason)
	}
}

// TestKafkaOutboxDeadAndReplay follows a kafka_outbox row through a dead
// letter and its replay: errored and error_reason set and push_attempts
// kept, then all of it and the claim columns reset (error_reason, a TEXT
// column, back to ”).
func TestKafkaOutboxDeadAndReplay(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	e := newEnv(t)
	if err := mysql.MigrateTable(ctx, e.dsn, mysql.Table{Name: "kafka_outbox"}); err != nil {
		t.Fatal(err)
	}
	e.exec(t, "INSERT INTO kafka_outbox (topic, payload_json, `key`, push_attempts, batch_id, push_started_at) "+
		"VALUES ('orders', 'not json', 'k', 4, UUID(), UTC_TIMESTAMP(6) - INTERVAL 1 DAY)")
	st, _ := e.store(t, e.db, "ko", "kafka_outbox", "kafka-outbox", layout.Spec{}, true)
	b, err := st.Claim(ctx, 10)
	if err != nil || b == nil {
		t.Fatalf("claim of a day-old foreign claim: %v %v", b, err)
	}
	if a := b.Rows()[0].Attempts; a != 4 {
		t.Errorf("claimed with %d attempts, want push_attempts 4", a)
	}
	const reason = "invalid payload: not valid JSON"
	if err := b.Complete(ctx, source.Outcome{Dead: []source.Dead{{Index: 0, Attempts: 5, Reason: reason}}}); err != nil {
		t.Fatal(err)
	}
	type state struct {
		errored, attempts int
		why               string
		done, claimed     bool
	}
	row := func() (s state) {
		t.Helper()
		if err := e.db.QueryRowContext(ctx, "SELECT errored, push_attempts, error_reason, push_completed_at IS NOT NULL, "+
			"batch_id IS NOT NULL OR push_started_at IS NOT NULL FROM kafka_outbox WHERE id = 1").
			Scan(&s.errored, &s.attempts, &s.why, &s.done, &s.claimed); err != nil {
			t.Fatal(err)
		}
		return s
	}
	if got := row(); got != (state{1, 5, reason, false, true}) {
		t.Fatalf("dead row %+v", got)
	}
	if b, _ := st.Claim(ctx, 10); b != nil {
		_ = b.Release(ctx)
		t.Fatal("an errored row was claimed")
	}
	dl, err := mysql.ListFailed(ctx, e.db, e.relayDB, mysql.DLQFilter{Source: "ko"})
	if err != nil || len(dl) != 1 || dl[0].Reason != reason || string(dl[0].Payload) != "not json" {
		t.Fatalf("dead letters %+v, %v", dl, err)
	}
	if n, err := st.Replay(ctx, dl, "test"); err != nil || n != 1 {
		t.Fatalf("replay: %d, %v", n, err)
	}
	if got := row(); got != (state{}) {
		t.Fatalf("replayed row %+v, want everything reset", got)
	}
	b, err = st.Claim(ctx, 10)
	if err != nil || b == nil || b.Rows()[0].ID != "1" || b.Rows()[0].Attempts != 0 {
		t.Fatalf("claim after replay: %v %v", b, err)
	}
	_ = b.Release(ctx)
	if dl, _ := mysql.ListFailed(ctx, e.db, e.relayDB, mysql.DLQFilter{Source: "ko"}); len(dl) != 0 {
		t.Errorf("replayed dead letter still listed: %+v", dl)
	}
}

// TestForeignClaimHoldsItsKey guards the switch-over from another relay on
// kafka_outbox: a row that relay claimed (batch_id, push_started_at) within
// the claim timeout holds the later rows of its key, not the other keys;
// once its claim expires it is claimed here, before them.
func TestForeignClaimHoldsItsKey(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	e := newEnv(t)
	if err := mysql.MigrateTable(ctx, e.dsn, mysql.Table{Name: "kafka_outbox"}); err != nil {
		t.Fatal(err)
	}
	e.exec(t, "INSERT INTO kafka_outbox (topic, payload_json, `key`, batch_id, push_started_at) VALUES "+
		"('orders', '{\"n\":1}', 'k', UUID(), UTC_TIMESTAMP(6)), ('orders', '{\"n\":2}', 'k', NULL, NULL), ('orders', '{\"n\":3}', 'j', NULL, NULL)")
	_, l := e.store(t, e.db, "ko", "kafka_outbox", "kafka-outbox", layout.Spec{}, true)
	opts := mysql.Options{Source: "ko", Table: mysql.Table{Name: "kafka_outbox"}, RelayDatabase: e.relayDB, Layout: l,
		Ordering: true, ClaimTimeout: time.Minute}
	if err := opts.Validate(); err != nil {
		t.Fatal(err)
	}
	st := mysql.New(e.db, opts)
	claim := func() []string {
		t.Helper()
		b, err := st.Claim(ctx, 10)
		if err != nil {
			t.Fatal(err)
		}
		if b == nil {
			return nil
		}
		defer func() { _ = b.Release(ctx) }()
		var got []string
		for _, r := range b.Rows() {
			got = append(got, string(r.Payload))
		}
		return got
	}
	if got := claim(); !slices.Equal(got, []string{`{"n":3}`}) {
		t.Fatalf("claimed %v while another relay holds key k's first row, want only key j's row", got)
	}
	e.exec(t, "UPDATE kafka_outbox SET push_started_at = UTC_TIMESTAMP(6) - INTERVAL 2 MINUTE WHERE batch_id IS NOT NULL")
	if got := claim(); !slices.Equal(got, []string{`{"n":1}`, `{"n":2}`, `{"n":3}`}) {
		t.Fatalf("claimed %v after the other relay's claim expired, want every row in order", got)
	}
}
