package postgres

import (
	"fmt"
	"strings"
	"time"

	"github.com/outbox-relay/outbox-relay/internal/layout"
)

// claimStatements builds the claim ($1 source, $2 limit, $3 window) and the
// claim under a lease ($4 shard, $5 owner, $6 term besides).
//
// A claim's cost is bounded by its window whatever the planner believes of
// the table: the candidates are the first $3 pending rows in the claim's
// order, read once (an ordered index scan that stops there, see
// claimSettings), less the rows that back off and the keys held by a row
// that backs off; every other rule is applied to that set alone, and the
// claim then locks, by address, the first $2 of what is left. Rules read
// once per row of the table (a NOT EXISTS over the pending rows) made a
// claim quadratic whenever the statistics said the backlog was small: just
// after an outage, or on a table never analyzed.
//
// The window must reach past the rows the holder's own batches in flight
// have locked: the store sizes it from the batches it holds (see
// Store.window).
func claimStatements(l *layout.Layout, table, relaySchema string, ordering bool, claimTimeout time.Duration) (claim, fenced string) {
	rs := QuoteIdent(relaySchema)
	id := sq.Col("o", l.ID.Name)
	order := []string{sq.Col("o", l.OrderBy)}
	if l.OrderBy != l.ID.Name {
		// Rows of one transaction share now(): they are ordered as their
		// statements ran, then by id (rows of one statement).
		order = append(order, tieSQL, id)
	}
	orderBy := strings.Join(order, ", ")

	candidate := []string{
		sq.Pending(l, "o"),
		"(r.next_attempt_at IS NULL OR r.next_attempt_at <= now())",
	}
	if ordering {
		// A key is held while a row of it backs off; rows without a key
		// (order key '') hold nothing.
		candidate = append(candidate, "NOT EXISTS (SELECT 1 FROM "+rs+".retry_state b WHERE b.source = $1 AND b.order_key = "+
			sq.OrderKey(l, "o")+" AND b.order_key <> '' AND b.next_attempt_at > now())")
	}
	cols := []string{"o.ctid AS tid"}
	pick := "SELECT tid FROM c"
	if l.BatchID.Name != "" {
		// A row another relay marked claimed within the claim timeout is
		// not taken: that relay may still deliver it (once its claim is
		// older, the relay died mid-batch and the row is taken here).
		claimed := sq.Col("o", l.ClaimedAt.Name)
		cols = append(cols, fmt.Sprintf("(%s IS NOT NULL AND %s IS NOT NULL AND %s >= now() - make_interval(secs => %d)) AS foreign_claim",
			sq.Col("o", l.BatchID.Name), claimed, claimed, int64(claimTimeout/time.Second)))
		pick = "SELECT tid FROM c WHERE NOT foreign_claim"
		if ordering {
			// Such a row also holds its key: the rows after it wait until
			// it is delivered or its claim expires. Every row before a
			// candidate is a candidate too (the window is a prefix of
			// the claim's order), so the window alone tells.
			cols = append(cols, sq.OrderKey(l, "o")+" AS k")
			var at []string
			for i, e := range order {
				cols = append(cols, fmt.Sprintf("%s AS o%d", e, i))
				at = append(at, fmt.Sprintf("o%d", i))
			}
			pick = `SELECT tid FROM (SELECT tid, foreign_claim, k <> '' AND bool_or(foreign_claim) OVER (PARTITION BY k ORDER BY ` +
				strings.Join(at, ", ") + ` ROWS BETWEEN UNBOUNDED PRECEDING AND 1 PRECEDING) AS held
    FROM c) w
  WHERE NOT foreign_claim AND NOT COALESCE(held, false)`
		}
	}

	where := []string{"o.ctid = ANY(ARRAY(" + pick + "))", sq.Pending(l, "o")}
	if l.XID != "" {
		// Only rows whose inserting transaction is older than every running
		// one: a row that commits late can then never overtake its key.
		// The relays' own transactions (claims lock rows, which gives
		// them a transaction id) insert no rows and do not count.
		where = append(where, sq.Col("o", l.XID)+" < "+xidBarrier)
	}
	selectList := rowSelect(l, "o", attemptsSQL(l), "o.ctid", tieSQL, "r.event_id IS NOT NULL")
	build := func(where []string) string {
		return fmt.Sprintf(`WITH c AS MATERIALIZED (
  SELECT %s
  FROM %s o
  LEFT JOIN %s.retry_state r ON r.source = $1 AND r.event_id = %s::text
  WHERE %s
  ORDER BY %s
  LIMIT $3
)
SELECT %s
FROM %s o
LEFT JOIN %s.retry_state r ON r.source = $1 AND r.event_id = %s::text
WHERE %s
ORDER BY %s
LIMIT $2
FOR UPDATE OF o SKIP LOCKED`, strings.Join(cols, ", "), table, rs, id, strings.Join(candidate, "\n    AND "), orderBy,
			strings.Join(selectList, ",\n  "), table, rs, id, strings.Join(where, "\n  AND "), orderBy)
	}
	// Under a lease the claim locks nothing unless the lease is still this
	// holder's, as of the statement's snapshot: a deposed holder's claim
	// must not hold rows even for a moment, or the new holder's claim
	// would skip them and take later rows of their keys first. A takeover
	// that commits after the snapshot finds the statement holding its lock
	// on the table and ends it (Leases.EndOwner) before claiming.
	lease := "EXISTS (SELECT 1 FROM " + rs + ".leases l WHERE l.shard = $4 AND l.owner = $5 AND l.term = $6)"
	return build(where), build(append(where[:len(where):len(where)], lease))
}

// claimSettings make the claim's plan the same whatever the table's
// statistics: the candidates come from an index that yields the claim's
// order (an index scan that stops at the window) rather than from a
// sequential or bitmap scan of every pending row followed by a sort, which
// the planner prefers when it believes the backlog is small. The settings
// hold for the claim's transaction, whose other statements find rows by
// their address or key.
const claimSettings = "SET LOCAL enable_seqscan = off; SET LOCAL enable_bitmapscan = off; SET LOCAL jit = off"
