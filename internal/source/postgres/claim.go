package postgres

import (
	"fmt"
	"strings"
	"time"

	"github.com/outbox-relay/outbox-relay/internal/layout"
	"github.com/outbox-relay/outbox-relay/internal/source"
)

// claimSQL is a source's claim: $1 source, $2 limit, then $3 window when
// windowed, then $4 the addresses of the rows the store's batches in
// flight hold when ownRows, then the lease (shard, owner, term) in fenced.
type claimSQL struct {
	// settings are the claim transaction's (claimSettings, or
	// bucketClaimSettings), its idle limit $1.
	settings      string
	plain, fenced string
	windowed      bool
	ownRows       bool
}

// claimStatements builds the claim of a layout.
//
// A claim's cost is bounded by its batch whatever the planner believes of
// the table: the pending rows are read in the claim's order by an index
// scan that stops once the batch is full (see claimSettings), and every
// rule about a row (it backs off, its key is held by a row that backs off)
// is an index probe for that row alone. A rule read once per row of the
// table (a NOT EXISTS over the pending rows) made a claim quadratic
// whenever the statistics said the backlog was small: just after an
// outage, or on a table never analyzed.
//
// One rule needs the rows before a row: a row another relay claimed holds
// its key (layouts that record claims, with ordering). Such a claim reads a
// window, the first $3 rows that could be claimed, once (a materialized
// CTE), finds the held keys within it with a window function, and then
// locks, by address, the first $2 of what is left: every row before a
// claimable row is in the window, so the window alone decides. The window
// must reach past the rows the holder's own batches in flight have locked;
// the store sizes it (see Store.window).
//
// A claim under a priority (see source.Priority) reads a window too, the
// first $3 candidates (its lookahead), ranks each row by its class (with
// ordering, by the best class of its key's rows from it on: sqlcore's
// EffectiveRank) and locks the first $2 by rank, then by the claim's order.
//
// The claim of one bucket of a source takes only the candidates of its
// bucket (sqlcore's InBucket); with ordering it reads a window too, and
// holds the keys of the rows another claimer locked (see bucketClaim).
func claimStatements(l *layout.Layout, table, relaySchema string, ordering bool, claimTimeout time.Duration, bucket source.Bucket, prio *source.Priority) claimSQL {
	rs := QuoteIdent(relaySchema)
	id := sq.Col("o", l.ID.Name)
	order := []string{sq.Col("o", l.OrderBy)}
	if l.OrderBy != l.ID.Name {
		// Rows of one transaction share now(): they are ordered as their
		// statements ran, then by id (rows of one statement).
		order = append(order, tieSQL, id)
	}
	orderBy := strings.Join(order, ", ")
	retryJoin := fmt.Sprintf("LEFT JOIN %s.retry_state r ON r.source = $1 AND r.event_id = %s::text", rs, id)

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
	in := sq.InBucket(l, "o", id+"::text", ordering, bucket)
	var foreign string
	if l.BatchID.Name != "" {
		// A row another relay marked claimed within the claim timeout is
		// not taken: that relay may still deliver it (once its claim is
		// older, the relay died mid-batch and the row is taken here).
		claimed := sq.Col("o", l.ClaimedAt.Name)
		foreign = fmt.Sprintf("(%s IS NOT NULL AND %s IS NOT NULL AND %s >= now() - make_interval(secs => %d))",
			sq.Col("o", l.BatchID.Name), claimed, claimed, int64(claimTimeout/time.Second))
	}
	var xid string
	if l.XID != "" {
		// Only rows whose inserting transaction is older than every running
		// one: a row that commits late can then never overtake its key.
		// The relays' own transactions (claims lock rows, which gives
		// them a transaction id) insert no rows and do not count.
		xid = sq.Col("o", l.XID) + " < " + xidBarrier
	}
	selectList := strings.Join(rowSelect(l, "o", attemptsSQL(l), "o.ctid", tieSQL, "r.event_id IS NOT NULL"), ",\n  ")
	lease := func(n int) string { return leaseHeldSQL(rs, n) }
	final := func(with, from string, where []string) string {
		return fmt.Sprintf(`%s
SELECT %s
FROM %s
%s
WHERE %s
ORDER BY %s
LIMIT $2
FOR UPDATE OF o SKIP LOCKED`, with, selectList, from, retryJoin, strings.Join(where, "\n  AND "), orderBy)
	}

	if bucket.Split() && ordering {
		return bucketClaim(claimParts{l: l, table: table, rs: rs, order: order, retryJoin: retryJoin, candidate: candidate,
			inBucket: in, foreign: foreign, xid: xid, selectList: rowSelect(l, "o", attemptsSQL(l), "o.ctid", tieSQL, "r.event_id IS NOT NULL")})
	}
	if in != "" {
		candidate = append(candidate, inBucketSQL(in))
	}
	if (foreign == "" || !ordering) && prio == nil {
		where := append([]string(nil), candidate...)
		if foreign != "" {
			where = append(where, "NOT "+foreign)
		}
		if xid != "" {
			where = append(where, xid)
		}
		from := table + " o"
		plain := strings.TrimPrefix(final("", from, where), "\n")
		fenced := strings.TrimPrefix(final("", from, append(where[:len(where):len(where)], lease(3))), "\n")
		c := claimSQL{settings: claimSettings, plain: plain, fenced: fenced}
		if bucket.Split() {
			c.settings = bucketClaimSettings
		}
		return c
	}

	if prio != nil {
		return priorityClaim(claimParts{l: l, table: table, rs: rs, order: order, retryJoin: retryJoin, candidate: candidate,
			foreign: foreign, xid: xid, selectList: rowSelect(l, "o", attemptsSQL(l), "o.ctid", tieSQL, "r.event_id IS NOT NULL")}, ordering, prio)
	}

	// The window: the candidates with their order key, their place in the
	// order and whether another relay holds them claimed.
	cols := []string{"o.ctid AS tid", foreign + " AS foreign_claim", sq.OrderKey(l, "o") + " AS k"}
	var at []string
	for i, e := range order {
		cols = append(cols, fmt.Sprintf("%s AS o%d", e, i))
		at = append(at, fmt.Sprintf("o%d", i))
	}
	window := fmt.Sprintf(`WITH c AS MATERIALIZED (
  SELECT %s
  FROM %s o
  %s
  WHERE %s
  ORDER BY %s
  LIMIT $3
)`, strings.Join(cols, ", "), table, retryJoin, strings.Join(candidate, "\n    AND "), orderBy)
	// A row another relay claimed holds its key: the rows after it wait
	// until it is delivered or its claim expires. The rows left are
	// fetched by their address (a TID scan a row).
	from := `(SELECT tid, foreign_claim, k <> '' AND bool_or(foreign_claim) OVER (PARTITION BY k ORDER BY ` +
		strings.Join(at, ", ") + ` ROWS BETWEEN UNBOUNDED PRECEDING AND 1 PRECEDING) AS held
  FROM c) w
JOIN ` + table + ` o ON o.ctid = w.tid`
	where := []string{"NOT w.foreign_claim", "NOT COALESCE(w.held, false)", sq.Pending(l, "o")}
	if xid != "" {
		where = append(where, xid)
	}
	return claimSQL{
		settings: claimSettings,
		plain:    final(window, from, where),
		fenced:   final(window, from, append(where[:len(where):len(where)], lease(4))),
		windowed: true,
	}
}

// claimSettings make the claim's plan the same whatever the table's
// statistics: the candidates come from an index that yields the claim's
// order (an index scan that stops once the claim is full) rather than from
// a sequential or bitmap scan of every pending row followed by a sort,
// which the planner prefers when it believes the backlog is small; and
// joins are nested loops that look each row up by its key or address,
// never a hash of a whole table. The settings hold for the claim's
// transaction, whose other statements find rows by their address or key.
// They inflate the cost of the plans they rule out past the threshold of
// JIT compilation, which would then cost each claim tens of milliseconds:
// JIT is off too. The transaction's idle
// limit ($1, in milliseconds) ends a claim its relay stopped tending.
// One statement, so that it travels in the claim's round trip.
const claimSettings = "SELECT " + claimSettingsList

const claimSettingsList = "set_config('enable_seqscan', 'off', true), set_config('enable_bitmapscan', 'off', true), " +
	"set_config('enable_hashjoin', 'off', true), set_config('enable_mergejoin', 'off', true), set_config('jit', 'off', true), " +
	"set_config('idle_in_transaction_session_timeout', $1, true)"

// leaseHeldSQL is the condition that the lease ($n shard, $n+1 owner, $n+2
// term) is still its holder's. Under a lease the claim locks nothing unless
// the lease is still this holder's, as of the statement's snapshot: a
// deposed holder's claim must not hold rows even for a moment, or the new
// holder's claim would skip them and take later rows of their keys first. A
// takeover that commits after the snapshot finds the statement holding its
// lock on the table and ends it (Leases.EndOwner) before claiming.
func leaseHeldSQL(rs string, n int) string {
	return fmt.Sprintf("EXISTS (SELECT 1 FROM %s.leases l WHERE l.shard = $%d AND l.owner = $%d AND l.term = $%d)", rs, n, n+1, n+2)
}
