package mysql_test

import (
	"context"
	"database/sql"
	"errors"
	"slices"
	"testing"

	"github.com/outbox-relay/outbox-relay/internal/mytest"
	"github.com/outbox-relay/outbox-relay/internal/source/mysql"
)

func TestMigrateUpDownUp(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	_, dsn := mytest.NewDatabase(t, "outbox_test")
	relayDB := "outbox_relay_" + mytest.Suffix()
	t.Cleanup(func() { mytest.Drop(t, relayDB) })
	admin := mytest.Admin(t)
	m, err := mysql.NewMigrator(dsn, relayDB)
	if err != nil {
		t.Fatal(err)
	}
	defer m.Close()
	st, err := m.Status(ctx)
	if err != nil || len(st) != 9 || st[0].Applied {
		t.Fatalf("status before up: %+v %v", st, err)
	}
	for round := range 2 {
		if err := m.Up(ctx); err != nil {
			t.Fatalf("round %d up: %v", round, err)
		}
		var idx []string
		rows, err := admin.QueryContext(ctx, "SELECT DISTINCT INDEX_NAME FROM information_schema.STATISTICS WHERE TABLE_SCHEMA = ? ORDER BY 1", relayDB)
		if err != nil {
			t.Fatal(err)
		}
		for rows.Next() {
			var s string
			_ = rows.Scan(&s)
			idx = append(idx, s)
		}
		_ = rows.Close()
		for _, want := range []string{"idx_relay_state_last_poll", "idx_relay_state_schema", "idx_failed_events_source",
			"idx_failed_events_type", "idx_failed_events_first_failed", "idx_failed_events_open", "idx_retry_state_key"} {
			if !slices.Contains(idx, want) {
				t.Errorf("round %d: index %s missing (have %v)", round, want, idx)
			}
		}
		st, err := m.Status(ctx)
		if err != nil {
			t.Fatal(err)
		}
		for _, s := range st {
			if !s.Applied {
				t.Errorf("round %d: migration %d not applied after up", round, s.Version)
			}
		}
		// relay_state keeps one row per source; times have microseconds.
		mytest.Exec(t, admin, "INSERT INTO "+relayDB+".relay_state (source, schema_name, table_name, last_poll_time) VALUES ('a', 'app', 'outbox', '2026-01-30 12:00:00.123456')")
		if _, err := admin.ExecContext(ctx, "INSERT INTO "+relayDB+".relay_state (source, schema_name, table_name) VALUES ('a', 'app', 'outbox')"); err == nil {
			t.Errorf("round %d: duplicate relay_state source accepted", round)
		}
		var poll string
		if err := admin.QueryRowContext(ctx, "SELECT CAST(last_poll_time AS CHAR) FROM "+relayDB+".relay_state").Scan(&poll); err != nil || poll != "2026-01-30 12:00:00.123456" {
			t.Errorf("round %d: last_poll_time kept as %q (%v)", round, poll, err)
		}
		// failed_events.payload only takes JSON.
		if _, err := admin.ExecContext(ctx, "INSERT INTO "+relayDB+".failed_events (original_event_id, source, source_schema, source_table, payload, failure_reason) VALUES ('1', 'a', 'app', 'outbox', 'not json', 'x')"); err == nil {
			t.Errorf("round %d: failed_events.payload took text that is not JSON", round)
		}
		// One step down undoes the newest migration only: replicas.ring,
		// then source_samples, then replicas, then leases.unended, then
		// relay_state's live columns, then the leases table.
		if err := m.Down(ctx, false); err != nil {
			t.Fatal(err)
		}
		var ring int
		if err := admin.QueryRowContext(ctx, "SELECT COUNT(*) FROM information_schema.COLUMNS WHERE TABLE_SCHEMA = ? AND TABLE_NAME = 'replicas' AND COLUMN_NAME = 'ring'", relayDB).Scan(&ring); err != nil || ring != 0 {
			t.Fatalf("round %d: replicas.ring still there after one step down (%v)", round, err)
		}
		if countTables(t, admin, relayDB, "source_samples") != 1 {
			t.Fatalf("round %d: source_samples dropped by the first step down", round)
		}
		if err := m.Down(ctx, false); err != nil {
			t.Fatal(err)
		}
		if countTables(t, admin, relayDB, "source_samples") != 0 || countTables(t, admin, relayDB, "replicas") != 1 {
			t.Fatalf("round %d: the first step down did not drop exactly source_samples", round)
		}
		if err := m.Down(ctx, false); err != nil {
			t.Fatal(err)
		}
		if countTables(t, admin, relayDB, "replicas") != 0 {
			t.Fatalf("round %d: replicas still there after the second step down", round)
		}
		if err := m.Down(ctx, false); err != nil {
			t.Fatal(err)
		}
		var unended int
		if err := admin.QueryRowContext(ctx, "SELECT COUNT(*) FROM information_schema.COLUMNS WHERE TABLE_SCHEMA = ? AND TABLE_NAME = 'leases' AND COLUMN_NAME = 'unended'", relayDB).Scan(&unended); err != nil || unended != 0 {
			t.Fatalf("round %d: leases.unended still there after one step down (%v)", round, err)
		}
		if err := m.Down(ctx, false); err != nil {
			t.Fatal(err)
		}
		var live int
		if err := admin.QueryRowContext(ctx, "SELECT COUNT(*) FROM information_schema.COLUMNS WHERE TABLE_SCHEMA = ? AND TABLE_NAME = 'relay_state' AND COLUMN_NAME = 'last_claim_at'", relayDB).Scan(&live); err != nil || live != 0 {
			t.Fatalf("round %d: relay_state.last_claim_at still there after one step down (%v)", round, err)
		}
		if n := countTables(t, admin, relayDB, "leases"); n != 1 {
			t.Fatalf("round %d: leases dropped by the first step down", round)
		}
		if err := m.Down(ctx, false); err != nil {
			t.Fatal(err)
		}
		if n := countTables(t, admin, relayDB, "leases"); n != 0 {
			t.Fatalf("round %d: leases still there after one step down", round)
		}
		if n := countTables(t, admin, relayDB, "retry_state"); n != 1 {
			t.Fatalf("round %d: retry_state gone after one step down", round)
		}
		if err := m.Down(ctx, true); err != nil {
			t.Fatalf("round %d down: %v", round, err)
		}
		var n int
		if err := admin.QueryRowContext(ctx, "SELECT COUNT(*) FROM information_schema.SCHEMATA WHERE SCHEMA_NAME = ?", relayDB).Scan(&n); err != nil {
			t.Fatal(err)
		}
		if n != 0 {
			t.Fatalf("round %d: relay database still there after down", round)
		}
	}
}

func countTables(t *testing.T, db *sql.DB, schema, table string) int {
	t.Helper()
	return queryInt(t, db, "SELECT COUNT(*) FROM information_schema.TABLES WHERE TABLE_SCHEMA = ? AND TABLE_NAME = ?", schema, table)
}

func TestIdentifierValidation(t *testing.T) {
	t.Parallel()
	long := "a123456789b123456789c123456789d123456789e123456789f123456789g1234"
	for _, c := range []struct {
		name string
		ok   bool
	}{
		{"outbox", true}, {"OutboxEvent", true}, {"kafka-outbox", true}, {"événements", true}, {long[:64], true},
		{long, false}, {"", false}, {"a`b", false}, {"a\x00b", false}, {"\xff", false},
	} {
		err := mysql.ValidateIdent("table", c.name)
		if (err == nil) != c.ok {
			t.Errorf("ValidateIdent(%q) = %v", c.name, err)
		}
		var ie *mysql.IdentError
		if err != nil && (!errors.As(err, &ie) || ie.Field != "table") {
			t.Errorf("ValidateIdent(%q) error %v does not name the field", c.name, err)
		}
	}
	if got := mysql.QuoteIdent("a`b"); got != "`a``b`" {
		t.Errorf("QuoteIdent = %s", got)
	}
	if got := (mysql.Table{Schema: "app", Name: "outbox"}).String(); got != "`app`.`outbox`" {
		t.Errorf("Table.String = %s", got)
	}
	// Options name the offending field; a store built from them refuses.
	e := newEnv(t)
	e.exec(t, kafkaOutbox)
	_, l := e.store(t, e.db, "k", "kafka_outbox", "", kafkaLayout, true)
	bad := *l
	bad.Error = "error`reason"
	opts := mysql.Options{Source: "k", Table: mysql.Table{Name: "kafka_outbox"}, RelayDatabase: e.relayDB, Layout: &bad}
	err := opts.Validate()
	var ie *mysql.IdentError
	if !errors.As(err, &ie) || ie.Field != "layout.error" {
		t.Fatalf("Validate: %v", err)
	}
	if _, err := mysql.New(e.db, opts).Claim(context.Background(), 10); !errors.As(err, &ie) {
		t.Fatalf("claim with invalid options: %v", err)
	}
	opts.Layout, opts.RelayDatabase = l, long
	if err := opts.Validate(); !errors.As(err, &ie) || ie.Field != "relay_database" {
		t.Fatalf("Validate with a long relay database: %v", err)
	}
	opts.RelayDatabase, opts.Table.Schema = e.relayDB, "app`db"
	if err := opts.Validate(); !errors.As(err, &ie) || ie.Field != "table (database)" {
		t.Fatalf("Validate with a backtick in the database: %v", err)
	}
	if _, err := mysql.Columns(context.Background(), e.db, mysql.Table{Name: "x`y"}); !errors.As(err, &ie) {
		t.Fatalf("Columns with a backtick: %v", err)
	}
	if _, err := mysql.NewMigrator(e.dsn, "relay`db"); !errors.As(err, &ie) {
		t.Fatalf("NewMigrator with a backtick: %v", err)
	}
}
