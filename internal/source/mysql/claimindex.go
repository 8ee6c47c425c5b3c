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
// for a layout whose pending rows have a NULL published-at column ordered
// by id, an index whose first column is that column (InnoDB orders a
// secondary index's equal entries by the primary key). It returns "" when
// there is none, and for every other layout.
func PendingIndex(ctx context.Context, db *sql.DB, t Table, l *layout.Layout) (string, error) {
	if l.Mode != "timestamp" || l.PublishedAt == "" || l.OrderBy != l.ID.Name {
		return "", nil
	}
	var name string
	err := db.QueryRowContext(ctx, `SELECT INDEX_NAME FROM information_schema.STATISTICS
WHERE TABLE_SCHEMA = COALESCE(NULLIF(?, ''), DATABASE()) AND TABLE_NAME = ? AND SEQ_IN_INDEX = 1 AND COLUMN_NAME = ?
ORDER BY INDEX_NAME LIMIT 1`, t.Schema, t.Name, l.PublishedAt).Scan(&name)
	switch {
	case err == sql.ErrNoRows:
		return "", nil
	case err != nil:
		return "", fmt.Errorf("indexes of %s: %w", t, err)
	}
	return name, nil
}
