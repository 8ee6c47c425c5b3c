package mysql

import (
	"context"
	"database/sql"
	"fmt"

	"github.com/outbox-relay/outbox-relay/internal/layout"
)

// ClaimIndex picks the index every claim of a source reads the table by:
// the primary key when the layout orders by its id, else an index whose
// first column is the order column, else the primary key. It returns the
// index's name.
//
// Every claim names its index because InnoDB locks the records of the index
// a locking read scans. Two claims reading by different indexes (the
// planner's choice moves with the table's statistics) miss each other's
// locks on the index they did not use: a later claim locked the entries of
// a batch still in flight in the secondary index, and that batch's
// acknowledgement, which changes those entries, waited for the later batch
// (which the engine completes after it) until the lock wait timeout.
//
// An index on the state column (push_completed_at, status) would spare the
// claim the delivered rows, but claims reading by it broke per-key order on
// MariaDB 10.11 (a row that had failed and was due again was passed over
// while a later row of its key was claimed), so it is never chosen; keep
// delivered rows few with the retention command.
func ClaimIndex(ctx context.Context, db *sql.DB, t Table, l *layout.Layout) (string, error) {
	if l.OrderBy == l.ID.Name {
		return "PRIMARY", nil
	}
	var name string
	err := db.QueryRowContext(ctx, `SELECT INDEX_NAME FROM information_schema.STATISTICS
WHERE TABLE_SCHEMA = COALESCE(NULLIF(?, ''), DATABASE()) AND TABLE_NAME = ? AND SEQ_IN_INDEX = 1 AND COLUMN_NAME = ?
ORDER BY INDEX_NAME = 'PRIMARY' DESC, INDEX_NAME LIMIT 1`, t.Schema, t.Name, l.OrderBy).Scan(&name)
	switch {
	case err == sql.ErrNoRows:
		return "PRIMARY", nil
	case err != nil:
		return "", fmt.Errorf("indexes of %s: %w", t, err)
	}
	return name, nil
}

// PendingIndex picks an index that holds a layout's pending rows together
// in the claim's order, for the reads that lock nothing (a claim's window):
// an index whose first column is the layout's state column (the published-at
// column, the status or the published flag), whose equal entries follow the
// order column, then the id: its second column is the order column, or the
// layout orders by id and the index has no second column or the id there
// (InnoDB orders a secondary index's equal entries by the primary key). The
// primary key must be the id column alone, as claims lock rows by it. It
// returns "" when there is none, and for layouts that delete their rows.
func PendingIndex(ctx context.Context, db *sql.DB, t Table, l *layout.Layout) (string, error) {
	state := stateColumn(l)
	if state == "" {
		return "", nil
	}
	rows, err := db.QueryContext(ctx, `SELECT INDEX_NAME, COLUMN_NAME FROM information_schema.STATISTICS
WHERE TABLE_SCHEMA = COALESCE(NULLIF(?, ''), DATABASE()) AND TABLE_NAME = ?
ORDER BY INDEX_NAME, SEQ_IN_INDEX`, t.Schema, t.Name)
	if err != nil {
		return "", fmt.Errorf("indexes of %s: %w", t, err)
	}
	defer rows.Close()
	cols := map[string][]string{}
	var names []string
	for rows.Next() {
		var name, col string
		if err := rows.Scan(&name, &col); err != nil {
			return "", fmt.Errorf("indexes of %s: %w", t, err)
		}
		if cols[name] == nil {
			names = append(names, name)
		}
		cols[name] = append(cols[name], col)
	}
	if err := rows.Err(); err != nil {
		return "", fmt.Errorf("indexes of %s: %w", t, err)
	}
	if pk := cols["PRIMARY"]; len(pk) != 1 || pk[0] != l.ID.Name {
		return "", nil
	}
	for _, name := range names {
		c := cols[name]
		if name == "PRIMARY" || c[0] != state {
			continue
		}
		byID := l.OrderBy == l.ID.Name
		if len(c) == 1 && byID || len(c) > 1 && (c[1] == l.OrderBy || byID && c[1] == l.ID.Name) {
			return name, nil
		}
	}
	return "", nil
}

// stateColumn is the column whose value says a row is pending (the
// published-at column, the status or the published flag), or "" for a
// layout that deletes its rows.
func stateColumn(l *layout.Layout) string {
	switch l.Mode {
	case "timestamp":
		return l.PublishedAt
	case "status":
		return l.Status
	case "flag":
		return l.Flag
	}
	return ""
}

// ClaimAdvice implements driver.ClaimAdvisor: a table that keeps its
// delivered rows and has no index of its pending rows in the claim's order
// (see PendingIndex) is claimed by its primary key or its order column's
// index, over every delivered row, each claim.
func (s *Store) ClaimAdvice() string {
	l := s.opts.Layout
	if s.invalid != nil || s.opts.PendingIndex != "" || stateColumn(l) == "" {
		return ""
	}
	cols := QuoteIdent(stateColumn(l))
	if l.OrderBy != l.ID.Name {
		cols += ", " + QuoteIdent(l.OrderBy)
	}
	return fmt.Sprintf("no index holds the pending rows in the claim's order, so each claim reads past every delivered row "+
		"the table keeps: add INDEX (%s) (the primary key must be %s alone), or keep delivered rows few with retention",
		cols, QuoteIdent(l.ID.Name))
}
