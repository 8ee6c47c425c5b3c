package postgres

import (
	"github.com/outbox-relay/outbox-relay/internal/layout"
	"github.com/outbox-relay/outbox-relay/internal/source/sqlcore"
)

// ErrNoAge is returned by Purge for a layout whose table has no column that
// dates a row (no published-at and no created-at column).
var ErrNoAge = sqlcore.ErrNoAge

// retentionPredicates returns, for alias o of table t, the conditions of a
// delivered row and of a dead-lettered row left in the table, and the
// expression that dates a settled row (see sqlcore.SQL.Retention). Where
// the row does not record its dead letters, an open dead letter is one in
// failed_events not yet replayed.
func retentionPredicates(l *layout.Layout, t Table, relaySchema string) (delivered, dead, age string, err error) {
	st, err := sq.Retention(l, "o", func(expr string) string { return expr + "::timestamptz" }, func() string {
		return sq.Col("o", l.ID.Name) + "::text IN (SELECT f.original_event_id FROM " + QuoteIdent(relaySchema) +
			".failed_events f WHERE f.source_schema = " + quoteLiteral(t.Schema) +
			" AND f.source_table = " + quoteLiteral(t.Name) + " AND f.replayed_at IS NULL)"
	})
	return st.Delivered, st.Dead, st.Age, err
}

// cutoffSQL is the moment before which a row is old enough; $1 is the age
// in seconds, measured by the database's clock.
const cutoffSQL = "now() - make_interval(secs => $1::float8)"

// sweep is one kind of row to delete in batches. Its batch statements take
// args as $1..$k, the batch size as $k+1 and, in next, the key the previous
// batch ended at as $k+2; each returns five columns: rows selected, rows
// deleted, dead letters among them, rows deleted beside them (audit rows)
// and the last key selected. count takes args alone and returns what a
// batch would delete: the first two counts.
type sweep struct {
	first, next, count string
	args               []any
}

// purgeSweep deletes the outbox table's settled rows older than $1.
func purgeSweep(l *layout.Layout, t Table, relaySchema string, includeDead bool, ageSecs float64) (sweep, error) {
	delivered, dead, age, err := retentionPredicates(l, t, relaySchema)
	if err != nil {
		return sweep{}, err
	}
	table := t.String()
	id := sq.Col("o", l.ID.Name)
	where := delivered
	deadExpr := "false"
	if includeDead {
		where = "(" + delivered + " OR " + dead + ")"
		deadExpr = dead
	}
	where += "\n    AND " + age + " < " + cutoffSQL
	build := func(cursor string) string {
		// The rows are chosen and locked in key order, skipping any that
		// a claim or another purge holds, and deleted by their address
		// (a TID scan) in the same statement.
		return `WITH c AS (
  SELECT o.ctid AS tid, ` + id + `::text AS id, (` + deadExpr + `) AS dead
  FROM ` + table + ` o
  WHERE ` + where + cursor + `
  ORDER BY ` + id + `
  LIMIT $2
  FOR UPDATE OF o SKIP LOCKED
), d AS (
  DELETE FROM ` + table + ` o WHERE o.ctid = ANY(ARRAY(SELECT tid FROM c)) RETURNING 1
)
SELECT (SELECT count(*) FROM c), (SELECT count(*) FROM d), (SELECT count(*) FROM c WHERE dead), 0::bigint,
  (SELECT id FROM c ORDER BY id::` + l.ID.Type + ` DESC LIMIT 1)`
	}
	return sweep{
		first: build(""),
		next:  build("\n    AND " + id + " > $3::text::" + l.ID.Type),
		count: `SELECT count(*), count(*) FILTER (WHERE ` + deadExpr + `)
FROM ` + table + ` o
WHERE ` + where,
		args: []any{ageSecs},
	}, nil
}

// failedEventsSweep deletes the dead letters of table t replayed before the
// cutoff, and their audit rows with them: those record replays of an event
// the relay no longer keeps.
func failedEventsSweep(t Table, relaySchema string, ageSecs float64) sweep {
	rs := QuoteIdent(relaySchema)
	where := `f.source_schema = $2 AND f.source_table = $3 AND f.replayed_at < ` + cutoffSQL
	build := func(cursor string) string {
		return `WITH c AS (
  SELECT f.id FROM ` + rs + `.failed_events f
  WHERE ` + where + cursor + `
  ORDER BY f.id
  LIMIT $4
  FOR UPDATE SKIP LOCKED
), a AS (
  DELETE FROM ` + rs + `.failed_event_audit x WHERE x.failed_event_id IN (SELECT id FROM c) RETURNING 1
), d AS (
  DELETE FROM ` + rs + `.failed_events f WHERE f.id IN (SELECT id FROM c) RETURNING 1
)
SELECT (SELECT count(*) FROM c), (SELECT count(*) FROM d), 0::bigint, (SELECT count(*) FROM a),
  (SELECT id::text FROM c ORDER BY id DESC LIMIT 1)`
	}
	return sweep{
		first: build(""),
		next:  build(" AND f.id > $5::uuid"),
		count: `SELECT count(*), (SELECT count(*) FROM ` + rs + `.failed_event_audit x WHERE x.failed_event_id IN (SELECT f.id FROM ` +
			rs + `.failed_events f WHERE ` + where + `))
FROM ` + rs + `.failed_events f WHERE ` + where,
		args: []any{ageSecs, t.Schema, t.Name},
	}
}

// retryStateSweep deletes the retry state of the source's events that no
// longer exist in its table, whatever their age: an event that is gone
// will never be retried.
func retryStateSweep(l *layout.Layout, t Table, relaySchema, source string) sweep {
	rs := QuoteIdent(relaySchema)
	where := `r.source = $1 AND NOT EXISTS (SELECT 1 FROM ` + t.String() + ` o WHERE ` +
		sq.Col("o", l.ID.Name) + ` = r.event_id::` + l.ID.Type + `)`
	build := func(cursor string) string {
		return `WITH c AS (
  SELECT r.event_id FROM ` + rs + `.retry_state r
  WHERE ` + where + cursor + `
  ORDER BY r.event_id
  LIMIT $2
  FOR UPDATE OF r SKIP LOCKED
), d AS (
  DELETE FROM ` + rs + `.retry_state r WHERE r.source = $1 AND r.event_id IN (SELECT event_id FROM c) RETURNING 1
)
SELECT (SELECT count(*) FROM c), (SELECT count(*) FROM d), 0::bigint, 0::bigint,
  (SELECT event_id FROM c ORDER BY event_id DESC LIMIT 1)`
	}
	return sweep{
		first: build(""),
		next:  build(" AND r.event_id > $3"),
		count: `SELECT count(*), 0::bigint FROM ` + rs + `.retry_state r WHERE ` + where,
		args:  []any{source},
	}
}
