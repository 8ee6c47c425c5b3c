package postgres_test

import (
	"context"
	"fmt"
	"strconv"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"

	"github.com/outbox-relay/outbox-relay/internal/pgtest"
)

// TestCursorClaimReadsABoundedWindow checks that a cursor's claim on a
// backlog the planner knows nothing of (never analyzed) reads a number of
// the table's rows bounded by its batch, whether it starts a range, goes
// on within one from a row in its middle, or reads the rows of a
// transaction the snapshot handed on saw in progress: the backlog is one
// transaction of 20,000 rows, the worst case for a read in transaction
// order.
func TestCursorClaimReadsABoundedWindow(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	_, pool := historyDB(t, "ALTER TABLE public.history SET (autovacuum_enabled = false)")
	const backlog, limit = 20_000, 500
	pgtest.Exec(t, pool, fmt.Sprintf(`INSERT INTO public.history (k, payload) SELECT 'k' || (g %% 1000), '{}' FROM generate_series(1, %d) g`, backlog))
	var xid, middle string
	if err := pool.QueryRow(ctx, "SELECT tx::text, (SELECT id::text FROM public.history ORDER BY id OFFSET 10000 LIMIT 1) FROM public.history LIMIT 1").Scan(&xid, &middle); err != nil {
		t.Fatal(err)
	}
	x, err := strconv.ParseUint(xid, 10, 64)
	if err != nil {
		t.Fatal(err)
	}
	next := strconv.FormatUint(x+1, 10)
	settings, _, ranged := openHistory(t, pool, "plan", true).ClaimSQL()
	for _, tc := range []struct {
		name  string
		part  int
		done  string
		after []any // xid, id
	}{
		{"a range from its start", 1, "1:1:", []any{nil, nil}},
		{"within a range", 1, "1:1:", []any{xid, middle}},
		{"a transaction seen in progress", 0, xid + ":" + next + ":" + xid, []any{nil, nil}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			tx, err := pool.Begin(ctx)
			if err != nil {
				t.Fatal(err)
			}
			defer func() { _ = tx.Rollback(ctx) }()
			var bound string
			if err := tx.QueryRow(ctx, settings, "60000", nil).Scan(&bound, nil, nil, nil, nil, nil, nil); err != nil {
				t.Fatal(err)
			}
			stmtCtx, cancel := context.WithTimeout(ctx, 30*time.Second)
			defer cancel()
			args := append([]any{pgx.QueryExecModeSimpleProtocol, "plan", limit, tc.done}, tc.after...)
			var plan []byte
			if err := tx.QueryRow(stmtCtx, "EXPLAIN (ANALYZE, FORMAT JSON) "+ranged[tc.part], args...).Scan(&plan); err != nil {
				t.Fatalf("explain the claim: %v", err)
			}
			read, claimed := rowsRead(t, plan, "history")
			if claimed != limit {
				t.Errorf("the claim took %d rows, want %d", claimed, limit)
			}
			if read > 2*limit {
				t.Errorf("the claim read %d rows of a %d-row backlog; a claim of %d should read at most %d:\n%s", read, backlog, limit, 2*limit, plan)
			}
			t.Logf("the claim read %d rows", read)
		})
	}
}
