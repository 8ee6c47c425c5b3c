package postgres_test

import (
	"context"
	"fmt"
	"sync"
	"testing"

	"github.com/jackc/pgx/v5"

	"github.com/outbox-relay/outbox-relay/internal/layout"
	"github.com/outbox-relay/outbox-relay/internal/pgtest"
	"github.com/outbox-relay/outbox-relay/internal/source/postgres"
	"github.com/outbox-relay/outbox-relay/internal/source/sourcetest"
)

// TestCursorConformance runs the store conformance suite on capture
// cursor: the tables of presets delete and status with an xid column, read
// by their layouts untouched.
func TestCursorConformance(t *testing.T) {
	t.Parallel()
	dsn, pool := migrated(t)
	sourcetest.Run(t, &cursorHarness{pgHarness{dsn: dsn, pool: pool}})
}

// cursorHarness makes the preset tables of pgHarness with an xid8 column
// tx (DEFAULT pg_current_xact_id()) and the index the claims read by.
type cursorHarness struct{ pgHarness }

func (h *cursorHarness) Presets() []string { return []string{"delete", "status"} }

// Capabilities: one claimer per source reads its position; the table is
// never written; a whole source, in the order transactions committed.
func (h *cursorHarness) Capabilities(string) sourcetest.Capabilities {
	return sourcetest.Capabilities{OneClaimer: true, TableUntouched: true, WholeSourceOnly: true, OwnClaimOrder: true}
}

func (h *cursorHarness) NewTable(t *testing.T, preset string) sourcetest.Table {
	t.Helper()
	ctx := context.Background()
	schema := "ct_" + pgtest.Suffix()
	pgtest.Exec(t, h.pool, "CREATE SCHEMA "+schema)
	t.Cleanup(func() { _, _ = h.pool.Exec(context.Background(), "DROP SCHEMA "+schema+" CASCADE") })
	tbl := postgres.Table{Schema: schema, Name: "outbox"}
	order := "id"
	switch preset {
	case "delete":
		pgtest.Exec(t, h.pool, sprintf(deleteTable, tbl))
	case "status":
		pgtest.Exec(t, h.pool, sprintf(statusTable, tbl))
		order = "created_at"
	default:
		t.Fatalf("no table for preset %q", preset)
	}
	pgtest.Exec(t, h.pool, "ALTER TABLE "+tbl.String()+" ADD COLUMN tx xid8 NOT NULL DEFAULT pg_current_xact_id()",
		"CREATE INDEX ON "+tbl.String()+" (tx, "+order+")")
	cols, err := postgres.Columns(ctx, h.pool, tbl)
	if err != nil {
		t.Fatal(err)
	}
	merged, explicit, err := layout.MergeUntouched(preset, layout.Spec{XIDColumn: "tx"}, "")
	if err != nil {
		t.Fatal(err)
	}
	l, err := layout.Resolve(merged, explicit, tbl.String(), cols)
	if err != nil {
		t.Fatal(err)
	}
	return &cursorTable{pgTable: &pgTable{h: &h.pgHarness, preset: preset, table: tbl, layout: l}, cols: cols}
}

// cursorTable is a preset's table read by capture cursor. Its rows'
// states are read from the relay's tables, for the source last opened on
// it (each case uses one).
type cursorTable struct {
	*pgTable
	cols []layout.Column
	mu   sync.Mutex
	src  string
}

func (tb *cursorTable) Open(t *testing.T, o sourcetest.Options) sourcetest.Store {
	t.Helper()
	tb.mu.Lock()
	tb.src = o.Source
	tb.mu.Unlock()
	pool, k := pgtest.OwnPool(t, tb.h.dsn, tb.h.pool)
	st, err := postgres.OpenCursor(context.Background(), pool, tb.table, tb.cols, postgres.CursorOptions{Source: o.Source,
		RelaySchema: relaySchema, Layout: tb.layout, Ordering: o.Ordering, ClaimTimeout: o.ClaimTimeout})
	if err != nil {
		t.Fatal(err)
	}
	if advice := st.ClaimAdvice(); advice != "" {
		t.Fatalf("claim advice on a table with the index it wants: %s", advice)
	}
	return &cursorStore{CursorStore: st, Killer: k}
}

// cursorStore is a cursor's store whose connections Kill cuts.
type cursorStore struct {
	*postgres.CursorStore
	pgtest.Killer
}

// State reads a row as the relay records it: ahead of the source's
// position or waiting in retry_state, pending; else with a dead letter not
// replayed, failed; else published.
func (tb *cursorTable) State(t *testing.T, id string) sourcetest.RowState {
	t.Helper()
	tb.mu.Lock()
	src := tb.src
	tb.mu.Unlock()
	q := fmt.Sprintf(`SELECT %s OR r.event_id IS NOT NULL,
  d.n > 0 AND r.event_id IS NULL,
  NOT (%[1]s) AND r.event_id IS NULL AND d.n = 0
FROM %s o, %s p
LEFT JOIN outbox_relay.retry_state r ON r.source = $2 AND r.event_id = $1
CROSS JOIN (SELECT count(*) AS n FROM outbox_relay.failed_events f
  WHERE f.source = $2 AND f.original_event_id = $1 AND f.replayed_at IS NULL) d
WHERE o.id::text = $1`, postgres.CursorAheadSQL(tb.layout, "o", "p", orderType(tb.cols, tb.layout)), tb.table, postgres.PositionOfSQL(relaySchema, "$2"))
	st := sourcetest.RowState{Exists: true}
	err := tb.h.pool.QueryRow(context.Background(), q, id, src).Scan(&st.Pending, &st.Failed, &st.Published)
	if err == pgx.ErrNoRows {
		return sourcetest.RowState{}
	}
	if err != nil {
		t.Fatalf("row state: %v", err)
	}
	return st
}

func orderType(cols []layout.Column, l *layout.Layout) string {
	for _, c := range cols {
		if c.Name == l.OrderBy {
			return c.Type
		}
	}
	return ""
}
