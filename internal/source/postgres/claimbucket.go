package postgres

import (
	"fmt"
	"strings"
	"sync"

	"github.com/jackc/pgx/v5/pgtype"

	"github.com/outbox-relay/outbox-relay/internal/layout"
)

// claimParts are the pieces of a claim that claimStatements writes once for
// every form of the claim.
type claimParts struct {
	l          *layout.Layout
	table, rs  string
	order      []string // the claim's order, as expressions of alias o (and r)
	retryJoin  string
	candidate  []string // a row that may be claimed, as far as the row itself says
	foreign    string   // a row another relay marked claimed; "" when the layout records no claims
	xid        string   // the row's transaction is older than every running one; "" when the layout has no xid column
	selectList []string
}

// bucketClaim is the claim of one bucket of a source, with ordering: $1
// source, $2 limit, $3 window, $4 the addresses of the rows the store's
// batches in flight hold, then the lease ($5 shard, owner, term) in fenced.
//
// While the shard count of a source changes, the holders of the old and of
// the new buckets claim side by side: a key of bucket 1/4 is a key of bucket
// 1/2 too, and their claims must not overtake each other's rows of it. So a
// claim of a bucket takes a row only when every earlier row of its key in
// its window is either taken by this claim too, or held by this store's own
// batches in flight (whose order the order book keeps). A row locked by any
// other transaction (another bucket's claim, a relay of the whole source)
// holds its key, like a row another relay marked claimed.
//
// Which rows another transaction holds is only known by trying to lock
// them: the claim reads its window once (c, locking nothing, the bucket's
// candidates in the claim's order), locks the first $2 rows of it that
// nothing holds (m, skipping locked rows), and then returns those of them
// that no row it could not lock precedes within their key (passed lists the
// rows it could not lock). A row locked and then not returned stays locked,
// untouched, until the batch ends: that happens only while another claimer
// holds rows of this bucket. Each step reads at most the window: the cost of
// the claim is bounded by its batch (its window reads about the bucket count
// times the window's rows of the table, as it filters them by bucket).
func bucketClaim(p claimParts) claimSQL {
	cols := []string{"o.ctid AS tid", "false AS foreign_claim", sq.OrderKey(p.l, "o") + " AS k"}
	if p.foreign != "" {
		cols[1] = p.foreign + " AS foreign_claim"
	}
	var at []string
	for i, e := range p.order {
		cols = append(cols, fmt.Sprintf("%s AS o%d", e, i))
		at = append(at, fmt.Sprintf("o%d", i))
	}
	candidate := p.candidate
	if p.xid != "" {
		candidate = append(candidate[:len(candidate):len(candidate)], p.xid)
	}
	orderAt := strings.Join(at, ", ")
	// The window, numbered in the claim's order (n), with the keys a row
	// another relay marked claimed holds.
	with := fmt.Sprintf(`WITH c AS MATERIALIZED (
  SELECT %s
  FROM %s o
  %s
  WHERE %s
  ORDER BY %s
  LIMIT $3
), w AS MATERIALIZED (
  SELECT tid, foreign_claim, k, row_number() OVER (ORDER BY %s) AS n,
    k <> '' AND bool_or(foreign_claim) OVER (PARTITION BY k ORDER BY %s ROWS BETWEEN UNBOUNDED PRECEDING AND 1 PRECEDING) AS held
  FROM c
)`, strings.Join(cols, ", "), p.table, p.retryJoin, strings.Join(candidate, "\n    AND "), strings.Join(p.order, ", "), orderAt, orderAt)

	// The rows this claim tries to lock: those of the window that are not
	// the store's own, nor held by a row another relay marked claimed.
	tried := "NOT w.foreign_claim AND NOT COALESCE(w.held, false) AND w.tid <> ALL($4::tid[])"
	list := make([]string, len(p.selectList))
	out := make([]string, len(p.selectList))
	for i, e := range p.selectList {
		list[i] = fmt.Sprintf("%s AS c%d", e, i)
		out[i] = fmt.Sprintf("c%d", i)
	}
	locked := func(lease string) string {
		where := tried + " AND " + sq.Pending(p.l, "o")
		if lease != "" {
			where += " AND " + lease
		}
		return fmt.Sprintf(`, m AS MATERIALIZED (
  SELECT w.n AS claim_n, w.k AS claim_k, %s
  FROM w JOIN %s o ON o.ctid = w.tid
  %s
  WHERE %s
  ORDER BY w.n
  LIMIT $2
  FOR UPDATE OF o SKIP LOCKED
), passed AS MATERIALIZED (
  SELECT w.n, w.k FROM w
  WHERE %s AND w.k <> '' AND w.n NOT IN (SELECT claim_n FROM m)
)
SELECT %s
FROM m
WHERE NOT EXISTS (SELECT 1 FROM passed p WHERE p.k = m.claim_k AND p.n < m.claim_n)
ORDER BY m.claim_n`, strings.Join(list, ",\n  "), p.table, p.retryJoin, where, tried, strings.Join(out, ", "))
	}
	return claimSQL{
		settings: bucketClaimSettings,
		plain:    with + locked(""),
		fenced:   with + locked(leaseHeldSQL(p.rs, 5)),
		windowed: true,
		ownRows:  true,
	}
}

// bucketClaimSettings are claimSettings with sorts off too, for the claims of
// a bucket. The planner knows nothing of the bucket's predicate (an
// expression of a hash) and believes it keeps a handful of rows; it would
// then read every candidate and sort them all, rather than read them in the
// order an index gives (an index of the order column, then an incremental
// sort of the rows that share its value) until the window is full. The sorts
// the claim cannot do without (of its window, a few thousand rows at most)
// are still made.
const bucketClaimSettings = "SELECT set_config('enable_sort', 'off', true), " + claimSettingsList

// ownRows are the addresses of the rows a store's batches in flight hold.
type ownRows struct {
	mu   sync.Mutex
	rows map[pgtype.TID]bool
}

func (o *ownRows) add(tids []pgtype.TID) {
	o.mu.Lock()
	defer o.mu.Unlock()
	if o.rows == nil {
		o.rows = map[pgtype.TID]bool{}
	}
	for _, t := range tids {
		o.rows[t] = true
	}
}

func (o *ownRows) remove(tids []pgtype.TID) {
	o.mu.Lock()
	defer o.mu.Unlock()
	for _, t := range tids {
		delete(o.rows, t)
	}
}

// list is the addresses, for the claim's $4.
func (o *ownRows) list() []pgtype.TID {
	o.mu.Lock()
	defer o.mu.Unlock()
	out := make([]pgtype.TID, 0, len(o.rows))
	for t := range o.rows {
		out = append(out, t)
	}
	return out
}
