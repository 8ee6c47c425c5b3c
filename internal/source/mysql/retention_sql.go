package mysql

import (
	"context"
	"database/sql"
	"errors"
	"fmt"

	"github.com/outbox-relay/outbox-relay/internal/layout"
	"github.com/outbox-relay/outbox-relay/internal/source/sqlcore"
)

// ErrNoAge is returned by Purge for a layout whose table has no column that
// dates a row (no published-at and no created-at column).
var ErrNoAge = sqlcore.ErrNoAge

// cutoffSQL is the moment before which a row is old enough; the argument
// is the age in microseconds, measured by the database's clock in UTC, as
// the store writes its timestamps.
const cutoffSQL = "(" + now + " - INTERVAL ? MICROSECOND)"

// retentionPredicates returns, for alias o of the table, the condition of a
// settled row as the row itself says (delivered or dead-lettered), the
// conditions of a delivered and of a dead-lettered row, and the expression
// that dates a settled row (see sqlcore.SQL.Retention). Where the row does
// not record its dead letters, an open dead letter is one in failed_events
// not yet replayed; settled leaves that test out, so that it can be checked
// again in a locking read without reading failed_events.
func retentionPredicates(l *layout.Layout, t Table, relayDB string) (settled, delivered, dead, age string, err error) {
	st, err := sq.Retention(l, "o", func(expr string) string { return expr }, func() string {
		schema := quoteLiteral(t.Schema)
		if t.Schema == "" {
			schema = "COALESCE(DATABASE(), '')"
		}
		return "EXISTS (SELECT 1 FROM " + QuoteIdent(relayDB) + ".failed_events f WHERE f.original_event_id = " +
			idTextSQL(l, "o") + binCollation + " AND f.source_schema = " + schema + " AND f.source_table = " +
			quoteLiteral(t.Name) + " AND f.replayed_at IS NULL)"
	})
	return st.Settled, st.Delivered, st.Dead, st.Age, err
}

// keyIndex names the index the purge's locking reads go by: the primary
// key when the id column is all of it, else an index whose first column is
// the id column, else "" (the planner's choice). Claims read by the primary
// key (see ClaimIndex); a purge reading by it too never locks a secondary
// index entry that a claim or an acknowledgement needs.
func keyIndex(ctx context.Context, db *sql.DB, t Table, id string) (string, error) {
	schemaExpr, args := "DATABASE()", []any{t.Name, id}
	if t.Schema != "" {
		schemaExpr, args = "?", []any{t.Schema, t.Name, id}
	}
	var name string
	err := db.QueryRowContext(ctx, `SELECT s.INDEX_NAME FROM information_schema.STATISTICS s
WHERE s.TABLE_SCHEMA = `+schemaExpr+` AND s.TABLE_NAME = ? AND s.SEQ_IN_INDEX = 1 AND s.COLUMN_NAME = ?
ORDER BY s.INDEX_NAME = 'PRIMARY' AND NOT EXISTS (SELECT 1 FROM information_schema.STATISTICS p
  WHERE p.TABLE_SCHEMA = s.TABLE_SCHEMA AND p.TABLE_NAME = s.TABLE_NAME AND p.INDEX_NAME = s.INDEX_NAME AND p.SEQ_IN_INDEX = 2) DESC,
  s.NON_UNIQUE, s.INDEX_NAME LIMIT 1`, args...).Scan(&name)
	switch {
	case errors.Is(err, sql.ErrNoRows):
		return "", nil
	case err != nil:
		return "", fmt.Errorf("indexes of %s: %w", t, err)
	}
	return name, nil
}

// sweep is one kind of row to delete in batches. Each batch first finds up
// to n candidates after the cursor with a plain (locking nothing) read,
// then locks each one still to delete by its key, skipping any another
// transaction holds, and deletes what it locked, key by key. A locking read
// that went through the table by its conditions would lock every row it
// passed over for a moment, pending ones included, and a claim would then
// skip a due row.
type sweep struct {
	// find returns the candidates' keys (as text) in key order, with
	// whether each is a dead letter; it takes args, the cursor when there
	// is one (cursorArg), and the batch size.
	find      string
	findAfter string
	args      []any
	// lock takes lockArgs, then one candidate's key (lockWrap wraps its
	// placeholder), and returns it if it locked it.
	lock     string
	lockArgs []any
	lockWrap string
	// deletes run in order on each locked key, the last argument after
	// delArgs; the first's rows affected are the rows deleted, the
	// others' rows deleted beside them. delWrap wraps each placeholder of
	// besideOf.
	deletes  []string
	delArgs  []any
	delWrap  string
	besideOf string // counts the rows deleted beside the keys, for a dry run
	// keep, when set, drops candidates that must stay (the retry state of
	// an event still in the table).
	keep func(ctx context.Context, q querier, keys []string) (map[string]bool, error)
}

// querier is a pool, a connection or a transaction.
type querier interface {
	QueryContext(ctx context.Context, q string, args ...any) (*sql.Rows, error)
}

// purgeSweep deletes the outbox table's settled rows older than the cutoff.
func purgeSweep(l *layout.Layout, t Table, relayDB, index string, includeDead bool, ageMicros int64) (sweep, error) {
	settled, delivered, dead, age, err := retentionPredicates(l, t, relayDB)
	if err != nil {
		return sweep{}, err
	}
	table := t.String()
	id := sq.Col("o", l.ID.Name)
	where, lockWhere, deadExpr := delivered, settled, "FALSE"
	if includeDead {
		where = "(" + delivered + " OR " + dead + ")"
		deadExpr = dead
	}
	old := age + " < " + cutoffSQL
	where += "\n  AND " + old
	force := ""
	if index != "" {
		force = " FORCE INDEX (" + QuoteIdent(index) + ")"
	}
	find := func(cursor string) string {
		return `SELECT ` + idTextSQL(l, "o") + `, ` + deadExpr + `
FROM ` + table + ` o` + force + `
WHERE ` + where + cursor + `
ORDER BY ` + id + `
LIMIT ?`
	}
	wrap := "%s"
	if w := idValueSQL(l, "%s"); w != "%s" {
		wrap = w
	}
	return sweep{
		find:      find(""),
		findAfter: find("\n  AND " + id + " > " + idValueSQL(l, "?")),
		args:      []any{ageMicros},
		// The lock checks the row's state and age again, but not
		// failed_events: a row that left the settled set (a replay) since
		// it was found is left alone.
		lock: `SELECT ` + idTextSQL(l, "o") + `
FROM ` + table + ` o` + force + `
WHERE ` + lockWhere + ` AND ` + old + ` AND ` + id + ` IN (%s)
FOR UPDATE SKIP LOCKED`,
		lockArgs: []any{ageMicros},
		lockWrap: wrap,
		deletes:  []string{"DELETE FROM " + table + " WHERE " + QuoteIdent(l.ID.Name) + " = " + idValueSQL(l, "?")},
		delWrap:  wrap,
	}, nil
}

// failedEventsSweep deletes the dead letters of table t replayed before the
// cutoff, and their audit rows: those record replays of an event the relay
// no longer keeps.
func failedEventsSweep(t Table, relayDB string, ageMicros int64) sweep {
	rs := QuoteIdent(relayDB)
	schema := "?"
	args := []any{t.Schema, t.Name, ageMicros}
	if t.Schema == "" {
		schema = "COALESCE(DATABASE(), '')"
		args = args[1:]
	}
	where := "f.source_schema = " + schema + " AND f.source_table = ? AND f.replayed_at < " + cutoffSQL
	find := func(cursor string) string {
		return `SELECT CAST(f.id AS CHAR), FALSE FROM ` + rs + `.failed_events f
WHERE ` + where + cursor + `
ORDER BY f.id
LIMIT ?`
	}
	return sweep{
		find:      find(""),
		findAfter: find(" AND f.id > CAST(? AS UNSIGNED)"),
		args:      args,
		lock: `SELECT CAST(f.id AS CHAR) FROM ` + rs + `.failed_events f FORCE INDEX (PRIMARY)
WHERE f.replayed_at < ` + cutoffSQL + ` AND f.id IN (%s)
FOR UPDATE SKIP LOCKED`,
		lockArgs: []any{ageMicros},
		lockWrap: "CAST(%s AS UNSIGNED)",
		deletes: []string{
			"DELETE FROM " + rs + ".failed_events WHERE id = CAST(? AS UNSIGNED)",
			"DELETE FROM " + rs + ".failed_event_audit WHERE failed_event_id = CAST(? AS UNSIGNED)",
		},
		delWrap:  "CAST(%s AS UNSIGNED)",
		besideOf: "SELECT COUNT(*) FROM " + rs + ".failed_event_audit WHERE failed_event_id IN (%s)",
	}
}

// retryStateSweep deletes the retry state of the source's events that are
// no longer in its table, whatever their age: an event that is gone will
// never be retried. Whether an event is there is asked of the table by its
// key, so that the lookup goes by the table's own index.
func retryStateSweep(l *layout.Layout, t Table, relayDB, source string) sweep {
	rs := QuoteIdent(relayDB)
	find := func(cursor string) string {
		return `SELECT r.event_id, FALSE FROM ` + rs + `.retry_state r
WHERE r.source = ?` + cursor + `
ORDER BY r.event_id
LIMIT ?`
	}
	wrap := "%s"
	if w := idValueSQL(l, "%s"); w != "%s" {
		wrap = w
	}
	exists := "SELECT " + idTextSQL(l, "o") + " FROM " + t.String() + " o WHERE " + sq.Col("o", l.ID.Name) + " IN (%s)"
	return sweep{
		find:      find(""),
		findAfter: find(" AND r.event_id > ?"),
		args:      []any{source},
		lock: `SELECT r.event_id FROM ` + rs + `.retry_state r FORCE INDEX (PRIMARY)
WHERE r.source = ? AND r.event_id IN (%s)
FOR UPDATE SKIP LOCKED`,
		lockArgs: []any{source},
		lockWrap: "%s",
		deletes:  []string{"DELETE FROM " + rs + ".retry_state WHERE source = ? AND event_id = ?"},
		delArgs:  []any{source},
		delWrap:  "%s",
		keep: func(ctx context.Context, q querier, keys []string) (map[string]bool, error) {
			there := map[string]bool{}
			err := scanKeys(ctx, q, fmt.Sprintf(exists, placeholders(len(keys), wrap)), keyArgs(nil, keys), func(k string) {
				there[k] = true
			})
			return there, err
		},
	}
}

// keyArgs appends keys to args.
func keyArgs(args []any, keys []string) []any {
	for _, k := range keys {
		args = append(args, k)
	}
	return args
}

// scanKeys runs a query of one text column and hands each value to fn.
func scanKeys(ctx context.Context, q querier, stmt string, args []any, fn func(string)) error {
	rows, err := q.QueryContext(ctx, stmt, args...)
	if err != nil {
		return err
	}
	defer rows.Close()
	for rows.Next() {
		var k string
		if err := rows.Scan(&k); err != nil {
			return err
		}
		fn(k)
	}
	return rows.Err()
}
