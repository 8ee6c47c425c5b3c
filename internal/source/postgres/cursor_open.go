package postgres

import (
	"context"
	"fmt"
	"slices"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgxpool"

	"github.com/outbox-relay/outbox-relay/internal/layout"
	"github.com/outbox-relay/outbox-relay/internal/source"
)

// OpenCursor builds the store of a source read by capture cursor on table t
// of columns cols: the layout's xid column must be an xid8; the claims'
// index is looked up for ClaimAdvice. An error starts with the field it is
// about.
func OpenCursor(ctx context.Context, pool *pgxpool.Pool, t Table, cols []layout.Column, o CursorOptions) (*CursorStore, error) {
	l := o.Layout
	typeOf := func(name string) string {
		i := slices.IndexFunc(cols, func(c layout.Column) bool { return c.Name == name })
		if i < 0 {
			return ""
		}
		return cols[i].Type
	}
	if l.XID == "" {
		return nil, fmt.Errorf("layout.xid_column: required with capture cursor: an xid8 column with DEFAULT pg_current_xact_id()")
	}
	if typ := typeOf(l.XID); typ != "xid8" {
		return nil, fmt.Errorf("layout.xid_column: column %q is %s; capture cursor needs an xid8 column with DEFAULT pg_current_xact_id()", l.XID, typ)
	}
	o.Table, o.OrderType = t, typeOf(l.OrderBy)
	advice, err := CursorIndexAdvice(ctx, pool, t, l)
	if err != nil {
		return nil, fmt.Errorf("table: %w", err)
	}
	o.Advice = advice
	return NewCursor(pool, o)
}

// CursorIndexAdvice says what index t lacks for the claims of a cursor to
// cost only their batch, or "": they read the rows in transaction order,
// then the layout's, by an index that leads with the xid column and the
// order column (the id when the layout orders by it). With the xid column
// alone, each claim sorts all the rows of the transactions it reads into
// (a transaction of a million rows is a million-row sort a claim); without
// it, each claim reads the table.
func CursorIndexAdvice(ctx context.Context, pool *pgxpool.Pool, t Table, l *layout.Layout) (string, error) {
	rows, err := pool.Query(ctx, `SELECT array_agg(a.attname::text ORDER BY k.n)
FROM pg_index i
CROSS JOIN LATERAL unnest(i.indkey::int2[]) WITH ORDINALITY AS k(attnum, n)
JOIN pg_attribute a ON a.attrelid = i.indrelid AND a.attnum = k.attnum
WHERE i.indrelid = $1::regclass AND i.indpred IS NULL AND i.indexprs IS NULL
GROUP BY i.indexrelid`, t.String())
	if err != nil {
		return "", fmt.Errorf("indexes of %s: %w", t, err)
	}
	indexes, err := pgx.CollectRows(rows, pgx.RowTo[[]string])
	if err != nil {
		return "", fmt.Errorf("indexes of %s: %w", t, err)
	}
	want := []string{l.XID, l.OrderBy}
	leads := func(n int) bool {
		return slices.ContainsFunc(indexes, func(cols []string) bool { return len(cols) >= n && slices.Equal(cols[:n], want[:n]) })
	}
	create := fmt.Sprintf("CREATE INDEX ON %s (%s, %s)", t, QuoteIdent(want[0]), QuoteIdent(want[1]))
	switch {
	case leads(2):
		return "", nil
	case leads(1):
		return fmt.Sprintf("the index on %s alone has each claim sort every row of the transactions it reads into "+
			"(one transaction of a million rows: a million-row sort a claim); %s", QuoteIdent(l.XID), create), nil
	}
	return fmt.Sprintf("no index leads with the xid column %s, so each claim reads the whole table; %s", QuoteIdent(l.XID), create), nil
}

// Replay implements driver.Replayer: a dead letter's row, which stays in
// the table, waits again in retry_state, due at once with no attempt, and
// is claimed by its id; the dead letter is marked replayed and audited.
func (s *CursorStore) Replay(ctx context.Context, events []FailedEvent, actor string) (int, error) {
	o := s.opts
	st := buildReplaySQL(o.Layout, o.Table, o.RelaySchema, o.Source, "")
	st.Reset = "SELECT 1 FROM " + o.Table.String() + " o WHERE " + s.ord.id + " = $1::text::" + o.Layout.ID.Type
	st.Restore = func(context.Context) (string, error) {
		return "", fmt.Errorf("the row is no longer in %s, and capture cursor never writes to the table", o.Table)
	}
	st.ClearRetry = `INSERT INTO ` + QuoteIdent(o.RelaySchema) + `.retry_state (source, event_id, attempts, next_attempt_at, last_error)
VALUES ($1, $2, 0, now(), 'replayed') ON CONFLICT (source, event_id) DO UPDATE SET attempts = 0, next_attempt_at = now(),
  last_error = 'replayed', first_failed_at = now(), updated_at = now()`
	return source.Replay(ctx, poolDriver{s.pool}, st, events, actor)
}
