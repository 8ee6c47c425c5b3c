package postgres_test

import (
	"context"
	"maps"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/outbox-relay/outbox-relay/internal/layout"
	"github.com/outbox-relay/outbox-relay/internal/pgtest"
	"github.com/outbox-relay/outbox-relay/internal/source"
	"github.com/outbox-relay/outbox-relay/internal/source/postgres"
)

// TestManagedTableMigrations checks that the relay creates kafka_outbox as
// seed 004 documents it, with its version table beside it, and that running
// the migrations again (another replica, a restart) changes nothing.
func TestManagedTableMigrations(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	dsn, pool := pgtest.NewDB(t)
	pgtest.Exec(t, pool, "CREATE SCHEMA app")
	tbl := postgres.Table{Schema: "app", Name: "kafka_outbox"}
	for range 2 {
		if err := postgres.MigrateTable(ctx, dsn, tbl); err != nil {
			t.Fatal(err)
		}
	}
	type column struct {
		typ, null, def string
	}
	rows, err := pool.Query(ctx, `SELECT column_name, data_type || COALESCE('(' || character_maximum_length || ')', ''), is_nullable,
  COALESCE(column_default, '') FROM information_schema.columns WHERE table_schema = 'app' AND table_name = 'kafka_outbox'`)
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
		got[name] = c
	}
	want := map[string]column{
		"id":                {"bigint", "NO", "nextval('app.kafka_outbox_id_seq'::regclass)"},
		"batch_id":          {"character varying(36)", "YES", ""},
		"push_started_at":   {"timestamp without time zone", "YES", ""},
		"push_completed_at": {"timestamp without time zone", "YES", ""},
		"topic":             {"character varying(255)", "NO", ""},
		"payload_json":      {"text", "NO", ""},
		"payload_headers":   {"text", "NO", "''::text"},
		"push_attempts":     {"integer", "NO", "0"},
		"key":               {"character varying(255)", "NO", "''::character varying"},
		"partition_key":     {"character varying(255)", "NO", "''::character varying"},
		"errored":           {"smallint", "NO", "0"},
		"error_reason":      {"text", "NO", "''::text"},
		"created_at":        {"timestamp without time zone", "NO", "now()"},
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
	var idx string
	if err := pool.QueryRow(ctx, `SELECT indexdef FROM pg_indexes WHERE schemaname = 'app' AND tablename = 'kafka_outbox'
  AND indexname = 'kafka_outbox_push_completed_at_idx'`).Scan(&idx); err != nil {
		t.Fatalf("index on push_completed_at: %v", err)
	}
	if want := "USING btree (push_completed_at)"; !strings.Contains(idx, want) {
		t.Errorf("index %q, want %q", idx, want)
	}
	m, err := postgres.NewTableMigrator(dsn, tbl)
	if err != nil {
		t.Fatal(err)
	}
	defer m.Close()
	st, err := m.Status(ctx)
	if err != nil {
		t.Fatal(err)
	}
	if len(st) < 2 {
		t.Fatalf("status %+v, want the table's migrations", st)
	}
	for _, s := range st {
		if !s.Applied {
			t.Errorf("migration %d not applied", s.Version)
		}
	}
	var n int
	if err := pool.QueryRow(ctx, "SELECT count(*) FROM app.kafka_outbox_goose_version WHERE version_id > 0").Scan(&n); err != nil || n != len(st) {
		t.Fatalf("version table beside the table holds %d applied versions (%v), want %d", n, err, len(st))
	}
	// An application inserts with the public columns only.
	pgtest.Exec(t, pool, `INSERT INTO app.kafka_outbox (topic, payload_json) VALUES ('t', '{}')`)
	if _, err := postgres.NewTableMigrator(dsn, postgres.Table{Schema: "app", Name: "KafkaOutbox"}); err == nil {
		t.Error("a table name that needs quoting was accepted")
	}
}

// TestManagedTableAdoptsExisting checks that a kafka_outbox the original
// relay created (same shape, no version table) is adopted, rows kept.
func TestManagedTableAdoptsExisting(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	dsn, pool := pgtest.NewDB(t)
	pgtest.Exec(t, pool, `CREATE TABLE public.kafka_outbox (
  id bigserial PRIMARY KEY, batch_id varchar(36), push_started_at timestamp, push_completed_at timestamp,
  topic varchar(255) NOT NULL, payload_json text NOT NULL, payload_headers text NOT NULL DEFAULT '',
  push_attempts int NOT NULL DEFAULT 0, key varchar(255) NOT NULL DEFAULT '', partition_key varchar(255) NOT NULL DEFAULT '',
  errored smallint NOT NULL DEFAULT 0, error_reason text NOT NULL DEFAULT '', created_at timestamp NOT NULL DEFAULT now())`,
		`INSERT INTO public.kafka_outbox (topic, payload_json) VALUES ('t', '{"kept": true}')`)
	if err := postgres.MigrateTable(ctx, dsn, postgres.Table{Schema: "public", Name: "kafka_outbox"}); err != nil {
		t.Fatal(err)
	}
	var n int
	if err := pool.QueryRow(ctx, "SELECT count(*) FROM public.kafka_outbox").Scan(&n); err != nil || n != 1 {
		t.Fatalf("rows after adopting the table: %d, %v", n, err)
	}
}

// TestKafkaOutboxDeadAndReplay follows a row of kafka_outbox through a
// dead letter and its replay: errored and error_reason set, push_attempts
// kept, then all of it reset.
func TestKafkaOutboxDeadAndReplay(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	dsn, pool := migrated(t)
	tbl := postgres.Table{Schema: "public", Name: "kafka_outbox"}
	if err := postgres.MigrateTable(ctx, dsn, tbl); err != nil {
		t.Fatal(err)
	}
	var id string
	if err := pool.QueryRow(ctx, `INSERT INTO kafka_outbox (topic, payload_json, key, push_attempts) VALUES ('orders', 'not json', 'k', 4)
RETURNING id::text`).Scan(&id); err != nil {
		t.Fatal(err)
	}
	st, _ := newStore(t, pool, "ko", tbl, "kafka-outbox", layout.Spec{}, true)
	b, err := st.Claim(ctx, 10)
	if err != nil || b == nil {
		t.Fatalf("claim: %v %v", b, err)
	}
	// Attempts another relay counted in push_attempts carry over.
	if a := b.Rows()[0].Attempts; a != 4 {
		t.Errorf("claimed with %d attempts, want push_attempts 4", a)
	}
	const reason = "invalid payload: not valid JSON"
	if err := b.Complete(ctx, source.Outcome{Dead: []source.Dead{{Index: 0, Attempts: 5, Reason: reason}}}); err != nil {
		t.Fatal(err)
	}
	var (
		errored, attempts int
		why               string
		completed         *time.Time
	)
	row := func() {
		t.Helper()
		if err := pool.QueryRow(ctx, "SELECT errored, error_reason, push_attempts, push_completed_at FROM kafka_outbox WHERE id = $1::bigint", id).
			Scan(&errored, &why, &attempts, &completed); err != nil {
			t.Fatal(err)
		}
	}
	row()
	if errored != 1 || why != reason || attempts != 5 || completed != nil {
		t.Fatalf("dead row: errored=%d reason=%q push_attempts=%d push_completed_at=%v", errored, why, attempts, completed)
	}
	if b, _ := st.Claim(ctx, 10); b != nil {
		_ = b.Release(ctx)
		t.Fatal("an errored row was claimed")
	}
	dl, err := postgres.ListFailed(ctx, pool, relaySchema, postgres.DLQFilter{Source: "ko"})
	if err != nil || len(dl) != 1 || dl[0].Reason != reason || string(dl[0].Payload) != "not json" {
		t.Fatalf("dead letters %+v, %v", dl, err)
	}
	if n, err := st.Replay(ctx, dl, "test"); err != nil || n != 1 {
		t.Fatalf("replay: %d, %v", n, err)
	}
	row()
	if errored != 0 || why != "" || attempts != 0 || completed != nil {
		t.Fatalf("replayed row: errored=%d reason=%q push_attempts=%d push_completed_at=%v; want reset", errored, why, attempts, completed)
	}
	b, err = st.Claim(ctx, 10)
	if err != nil || b == nil || b.Rows()[0].ID != id || b.Rows()[0].Attempts != 0 {
		t.Fatalf("claim after replay: %v %v", b, err)
	}
	_ = b.Release(ctx)
}

// TestForeignClaimHoldsItsKey guards the switch-over from another relay on
// kafka_outbox: a row that relay claimed (batch_id, push_started_at) within
// the claim timeout holds the later rows of its key, not the other keys;
// once its claim expires it is claimed here, before them.
func TestForeignClaimHoldsItsKey(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	dsn, pool := migrated(t)
	tbl := postgres.Table{Schema: "public", Name: "kafka_outbox"}
	if err := postgres.MigrateTable(ctx, dsn, tbl); err != nil {
		t.Fatal(err)
	}
	pgtest.Exec(t, pool, `INSERT INTO kafka_outbox (topic, payload_json, key, batch_id, push_started_at) VALUES
  ('orders', '{"n":1}', 'k', 'other-relay', now()::timestamp),
  ('orders', '{"n":2}', 'k', NULL, NULL),
  ('orders', '{"n":3}', 'j', NULL, NULL)`)
	_, l := newStore(t, pool, "ko", tbl, "kafka-outbox", layout.Spec{}, true)
	st := postgres.New(pool, postgres.Options{Source: "ko", Table: tbl, RelaySchema: relaySchema, Layout: l, Ordering: true,
		ClaimTimeout: time.Minute})
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
	pgtest.Exec(t, pool, `UPDATE kafka_outbox SET push_started_at = now()::timestamp - interval '2 minutes' WHERE key = 'k' AND batch_id IS NOT NULL`)
	if got := claim(); !slices.Equal(got, []string{`{"n":1}`, `{"n":2}`, `{"n":3}`}) {
		t.Fatalf("claimed %v after the other relay's claim expired, want every row in order", got)
	}
}
