package postgres

import (
	"strings"

	"github.com/outbox-relay/outbox-relay/internal/layout"
)

// cursorSQL is the SQL of a source read by capture cursor (see CursorStore),
// built once from its layout.
type cursorSQL struct {
	// settings are the claim transaction's (claimSettings), $1 its idle
	// limit, and its bound ($2, or a fresh snapshot when NULL), which it
	// returns: the claims of the transaction read it back.
	settings string
	// retry claims due rows of retry_state: $1 source, $2 limit, $3 the
	// ids of the store's batches in flight.
	retry string
	// ranged claims the rows of the range: [0] those whose transactions
	// were in progress in the snapshot handed on, [1] the newer ones. $1
	// source, $2 limit, $3 the snapshot handed on, then the place after
	// which to read ($4 xid, $5 id, and $6 order value and $7 statement
	// when the layout orders by a column other than the id), NULL for
	// the start of the range.
	ranged [2]string
	// load reads the position recorded: $1 source.
	load string
	// advance records the position after a batch, over the one it was
	// claimed from: $1 source, $2 schema, $3 table, $4 done, $5 bound, $6
	// after xid, $7 after order value, $8 after statement, $9 after id,
	// $10 the version claimed from. It fails (division by zero) when the
	// position recorded is another.
	advance string
	// requeue puts rows in retry_state, due at once, with no attempt: $1
	// source, $2 ids, $3 order keys, $4 errors, $5 statements.
	requeue string
	// The completion's writes to the relay's tables (see relayWrites).
	relaySQL
	stats string
}

// cursorBound is the claim transaction's bound: the snapshot up to which
// its claims read.
const cursorBound = "(SELECT current_setting('outbox_relay.bound')::pg_snapshot)"

// startSnapshot is the position of a source never read: no transaction is
// visible in it, so every row of the table is ahead.
const startSnapshot = "1:1:"

// rowOrder is what orders the rows of a range: their transaction (xid),
// then within a transaction the layout's order, the statement that
// inserted them and their id; by the id alone after the xid when the
// layout orders by it. key lists the expressions, in order.
type rowOrder struct {
	xid, id, order, tie string
	idType, orderType   string
}

func newRowOrder(l *layout.Layout, alias, orderType string) rowOrder {
	o := rowOrder{xid: sq.Col(alias, l.XID), id: sq.Col(alias, l.ID.Name), idType: l.ID.Type}
	if l.OrderBy != l.ID.Name {
		o.order, o.tie, o.orderType = sq.Col(alias, l.OrderBy), alias+".cmin::text::bigint", orderType
	}
	return o
}

// byColumn says whether the order has an order column besides the id.
func (o rowOrder) byColumn() bool { return o.order != "" }

func (o rowOrder) key() []string {
	if o.byColumn() {
		return []string{o.xid, o.order, o.tie, o.id}
	}
	return []string{o.xid, o.id}
}

// compare compares the order's key with op to a place: the values xid,
// id, order and statement, text cast to their types (order and statement
// only when the order has a column).
func (o rowOrder) compare(op, xid, id, order, tie string) string {
	vals := []string{xid + "::xid8", id + "::" + o.idType}
	if o.byColumn() {
		vals = []string{vals[0], order + "::" + o.orderType, tie + "::bigint", vals[1]}
	}
	return "(" + strings.Join(o.key(), ", ") + ") " + op + " (" + strings.Join(vals, ", ") + ")"
}

func buildCursorSQL(l *layout.Layout, table, relaySchema, orderType string, ordering bool) cursorSQL {
	rs := QuoteIdent(relaySchema)
	ord := newRowOrder(l, "o", orderType)
	var s cursorSQL
	s.settings = "SELECT set_config('outbox_relay.bound', COALESCE($2::text, pg_current_snapshot()::text), true), " + claimSettingsList

	heldKey := func(key string) string {
		return "EXISTS (SELECT 1 FROM " + rs + ".retry_state b WHERE b.source = $1 AND b.order_key = " + key +
			" AND b.order_key <> '' AND b.next_attempt_at > now())"
	}
	orderText, tie := "NULL::text", "0::bigint"
	if ord.byColumn() {
		orderText, tie = ord.order+"::text", ord.tie
	}
	cols := func(attempts, retrying, held string) string {
		c := append(rowSelect(l, "o", attempts, "NULL::tid", tie, retrying), ord.xid+"::text", orderText, held)
		return strings.Join(c, ",\n  ")
	}
	orderBy := strings.Join(ord.key(), ", ")

	// Rows due again, in the order they first failed (the order the
	// cursor handed them on in: a batch's retries share its time), then
	// in the range's order; with ordering, not those of a key another row
	// of which backs off.
	where := []string{"r.source = $1", "r.next_attempt_at <= now()", "r.event_id <> ALL($3::text[])"}
	if ordering {
		where = append(where, "NOT "+heldKey(sq.OrderKey(l, "o")))
	}
	s.retry = "SELECT " + cols("r.attempts", "true", "false") + "\nFROM " + rs + ".retry_state r\nJOIN " + table + " o ON " +
		ord.id + " = r.event_id::" + l.ID.Type + "\nWHERE " + strings.Join(where, "\n  AND ") +
		"\nORDER BY r.first_failed_at, " + orderBy + "\nLIMIT $2"

	// The range's rows, each saying whether its key is held: a row of the
	// source backing off holds its key (checked once, then per row only
	// when some key is held).
	held := "(false AND $1::text IS NOT NULL)" // without ordering no key is held ($1 typed all the same)
	if ordering {
		held = "(EXISTS (SELECT 1 FROM " + rs + ".retry_state b WHERE b.source = $1 AND b.order_key <> '' AND b.next_attempt_at > now()) AND " +
			heldKey(sq.OrderKey(l, "o")) + ")"
	}
	after := "($4::text IS NULL OR " + ord.compare(">", "$4::text", "$5::text", "$6::text", "$7::text") + ")"
	done := "$3::text::pg_snapshot"
	ranged := func(which string) string {
		return "SELECT " + cols("0", "false", held) + "\nFROM " + table + " o\nWHERE " + which +
			"\n  AND pg_visible_in_snapshot(" + ord.xid + ", " + cursorBound + ")\n  AND " + after +
			"\nORDER BY " + orderBy + "\nLIMIT $2"
	}
	from := "COALESCE($4::text::xid8, '0'::xid8)"
	s.ranged[0] = ranged(ord.xid + " = ANY(ARRAY(SELECT pg_snapshot_xip(" + done + ")))\n  AND " + ord.xid + " >= " + from)
	s.ranged[1] = ranged(ord.xid + " >= GREATEST(pg_snapshot_xmax(" + done + "), " + from + ")\n  AND " +
		ord.xid + " < pg_snapshot_xmax(" + cursorBound + ")")

	s.load = `SELECT position_done::text, position_bound::text, position_after_xid::text, position_after_order,
  position_after_tie, position_after_id, position_version
FROM ` + rs + `.relay_state WHERE source = $1`
	s.advance = `WITH u AS (
  INSERT INTO ` + rs + `.relay_state AS t (source, schema_name, table_name, position_done, position_bound,
    position_after_xid, position_after_order, position_after_tie, position_after_id, position_version)
  VALUES ($1, $2, $3, $4::text::pg_snapshot, $5::text::pg_snapshot, $6::text::xid8, $7::text, $8::bigint, $9::text, $10::bigint + 1)
  ON CONFLICT (source) DO UPDATE SET position_done = excluded.position_done, position_bound = excluded.position_bound,
    position_after_xid = excluded.position_after_xid, position_after_order = excluded.position_after_order,
    position_after_tie = excluded.position_after_tie, position_after_id = excluded.position_after_id,
    position_version = excluded.position_version
  WHERE t.position_version = $10::bigint
  RETURNING 1)
SELECT 1 / count(*) FROM u`
	s.requeue = `INSERT INTO ` + rs + `.retry_state (source, event_id, order_key, attempts, next_attempt_at, last_error, tie)
SELECT $1, u.id, u.k, 0, now(), u.err, u.tie FROM unnest($2::text[], $3::text[], $4::text[], $5::bigint[]) AS u(id, k, err, tie)
ON CONFLICT (source, event_id) DO NOTHING`
	s.relaySQL = newRelaySQL(l, table, rs)

	created := "NULL::timestamptz"
	if l.CreatedAt != "" {
		created = sq.Col("o", l.CreatedAt) + "::timestamptz"
	}
	// The rows ahead, read as the claims read them (the transactions in
	// progress in the position by their ids, the newer ones by a range of
	// the index): never the rows behind the position, which a history
	// table keeps for ever.
	var ahead []string
	for _, part := range cursorAheadParts(ord, "p") {
		ahead = append(ahead, "SELECT "+created+" AS created FROM "+positionOf(rs, "$1")+" p, "+table+" o WHERE "+part)
	}
	backlog := `SELECT count(*), min(b.created) AS min FROM (
  ` + strings.Join(ahead, "\n  UNION ALL\n  ") + `
  UNION ALL
  SELECT ` + created + ` FROM ` + rs + `.retry_state r JOIN ` + table + ` o ON ` + ord.id + ` = r.event_id::` + l.ID.Type + `
  WHERE r.source = $1) b`
	s.stats = StatsStatement(relaySchema, backlog)
	return s
}

// positionOf is the position recorded for source src (an SQL expression),
// a row with relay_state's position columns: the start when none is.
func positionOf(rs, src string) string {
	return `(SELECT COALESCE(x.position_done, '` + startSnapshot + `'::pg_snapshot) AS position_done, x.position_bound,
    x.position_after_xid, x.position_after_order, x.position_after_tie, x.position_after_id
  FROM (SELECT 1) one LEFT JOIN ` + rs + `.relay_state x ON x.source = ` + src + `)`
}

// cursorAhead is the condition that a row (ord's alias) is ahead of the
// position p (a row of positionOf): not handed on yet (see
// cursorAheadParts).
func cursorAhead(ord rowOrder, p string) string {
	parts := cursorAheadParts(ord, p)
	return "((" + strings.Join(parts[:], ") OR (") + "))"
}

// cursorAheadParts are the disjoint conditions that a row is ahead of the
// position p, each leading with conditions on the xid column (and the order
// after it) an index reads, so that counting the rows ahead never reads
// those behind (a history table keeps them for ever): its transaction was
// in progress in the snapshot handed on; or it is newer, and either no
// range is taken in part, or it was in progress in that range's bound, or
// the row comes after the last one taken in the range.
func cursorAheadParts(ord rowOrder, p string) [4]string {
	done, bound := p+".position_done", p+".position_bound"
	newer := ord.xid + " >= pg_snapshot_xmax(" + done + ")"
	after := ord.compare(">", p+".position_after_xid::text", p+".position_after_id", p+".position_after_order", p+".position_after_tie::text")
	return [4]string{
		ord.xid + " = ANY(ARRAY(SELECT pg_snapshot_xip(" + done + ")))\n    AND NOT (" + bound + " IS NOT NULL AND pg_visible_in_snapshot(" +
			ord.xid + ", " + bound + ") AND NOT " + after + ")",
		newer + " AND " + bound + " IS NULL",
		ord.xid + " = ANY(ARRAY(SELECT pg_snapshot_xip(" + bound + ")))\n    AND " + newer + " AND " + ord.xid + " < " + p + ".position_after_xid",
		newer + "\n    AND " + after,
	}
}
