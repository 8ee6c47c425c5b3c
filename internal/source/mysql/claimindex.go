package mysql

import (
	"context"
	"database/sql"
	"fmt"

	"github.com/outbox-relay/outbox-relay/internal/layout"
)

// ClaimIndex picks the index every claim of a source reads the table by.
//
// InnoDB locks the records of the index a locking read scans. Two claims
// that scan different indexes of the same table (the planner's choice moves
// with the table's statistics) do not see each other's locks on the index
// they did not use: a claim by the primary key leaves the rows' entries in a
// secondary index unlocked, a later claim by that secondary index locks
// those entries while it skips the rows, and the first batch's
// acknowledgement, which must change the entries (push_completed_at set),
// then waits for the later batch, which the engine completes after it.
// Every claim therefore names its index: one whose first column is the
// layout's state column (push_completed_at, status, published), which also
// serves the claim best, else one on the order column, else the primary
// key. It returns the index's name.
func ClaimIndex(ctx context.Context, db *sql.DB, t Table, l *layout.Layout) (string, error) {
	var stateCol string
	switch l.Mode {
	case "flag":
		stateCol = l.Flag
	case "timestamp":
		stateCol = l.PublishedAt
	case "status":
		stateCol = l.Status
	}
	rows, err := db.QueryContext(ctx, `SELECT INDEX_NAME, COLUMN_NAME FROM information_schema.STATISTICS
WHERE TABLE_SCHEMA = COALESCE(NULLIF(?, ''), DATABASE()) AND TABLE_NAME = ? AND SEQ_IN_INDEX = 1
ORDER BY INDEX_NAME`, t.Schema, t.Name)
	if err != nil {
		return "", fmt.Errorf("indexes of %s: %w", t, err)
	}
	defer rows.Close()
	var byState, byOrder string
	for rows.Next() {
		var name, column string
		if err := rows.Scan(&name, &column); err != nil {
			return "", fmt.Errorf("indexes of %s: %w", t, err)
		}
		switch {
		case stateCol != "" && column == stateCol && byState == "":
			byState = name
		case column == l.OrderBy && byOrder == "":
			byOrder = name
		}
	}
	if err := rows.Err(); err != nil {
		return "", fmt.Errorf("indexes of %s: %w", t, err)
	}
	switch {
	case byState != "":
		return byState, nil
	case byOrder != "":
		return byOrder, nil
	}
	return "PRIMARY", nil
}
