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
	candidate  []string // a row that may be claimed, as far as the row itself says, its bucket aside
	inBucket   string   // the row is in the store's bucket (sqlcore's InBucket)
	foreign    string   // a row another relay marked claimed; "" when the layout records no claims
	xid        string   // the row's transaction is older than every running one; "" when the layout has no xid column
	selectList []string
}

// bucketClaim is the claim of one bucket of a source, with ordering: $1
// source, $2 limit, $3 window (see source.BucketWindow), $4 the addresses
// of the rows the store's batches in flight hold, then the lease ($5 shard,
// owner, term) in fenced.
//
// While the shard count of a source changes, the holders of the old and of
// the new buckets claim side by side: a key of bucket 1/4 is a key of bucket
// 1/2 too, and their claims must not overtake each other's rows of it. So a
// claim of a bucket takes a row only when every earlier row of its key is
// either taken by this claim too, or held by this store's own batches in
// flight (whose order the order book keeps). A row locked by any other
// transaction (another bucket's claim, a relay of the whole source) holds
// its key, like a row another relay marked claimed.
//
// Which rows another transaction holds is only known by trying to lock
// them, and which rows are the bucket's only by hashing their keys, which
// costs more than the rest of reading a row. The head of the order is
// mostly rows locked by the batches in flight of every bucket, which the
// claim passes over without hashing them:
//
//   - s is where the bucket's rows that nothing locks begin: its first
//     candidate that no running transaction locks (lockedSQL) and that is
//     not the store's own (the rows of a batch that ended after the
//     statement's snapshot are not locked any more, and are still seen),
//     found hashing only the other rows;
//   - h are the keys that the rows before s hold: every candidate there of
//     the bucket is locked, and a locked row (one with an xmax: more than
//     needed) of a key of the window holds it, but the store's own;
//   - c is the window, read once from s on and locking nothing: the bucket's
//     candidates in the claim's order, numbered (n);
//   - t are the rows of the window the claim tries: not the store's own, nor
//     marked claimed by another relay or after such a row of their key, nor
//     of a key h holds;
//   - m locks the first $2 of them, skipping the rows it cannot lock, and the
//     claim returns those of them that no row it tried and could not lock
//     precedes within their key (passed).
//
// A row locked and then not returned stays locked, untouched, until the
// batch ends: that happens only while another claimer holds rows of this
// bucket. Each step reads at most the window, or the rows before it: the
// cost of the claim is bounded by its batch (the window reads about the
// bucket count times its rows of the table, as it filters them by bucket).
func bucketClaim(p claimParts) claimSQL {
	key := sq.OrderKey(p.l, "o")
	cols := []string{"o.ctid AS tid", "false AS foreign_claim", key + " AS k"}
	if p.foreign != "" {
		cols[1] = p.foreign + " AS foreign_claim"
	}
	orderBy := strings.Join(p.order, ", ")
	cols = append(cols, "row_number() OVER (ORDER BY "+orderBy+") AS n")
	candidate := p.candidate
	if p.xid != "" {
		candidate = append(candidate[:len(candidate):len(candidate)], p.xid)
	}
	where := strings.Join(candidate, "\n    AND ")
	own := "(SELECT unnest($4::tid[]))"
	// Rows that hold their key within the window: those another relay
	// marked claimed.
	held := ""
	if p.foreign != "" {
		held = " AND NOT (c.k IN (SELECT k FROM c f WHERE f.foreign_claim AND f.k <> '')" +
			" AND EXISTS (SELECT 1 FROM c f WHERE f.foreign_claim AND f.k = c.k AND f.n < c.n))"
	}
	with := fmt.Sprintf(`WITH s AS MATERIALIZED (
  SELECT %[1]s AS o0
  FROM %[2]s o
  %[3]s
  WHERE %[4]s
    AND %[5]s
  ORDER BY %[6]s
  LIMIT 1
), c AS MATERIALIZED (
  SELECT %[7]s
  FROM %[2]s o
  %[3]s
  WHERE %[1]s >= (SELECT o0 FROM s)
    AND %[4]s
    AND %[8]s
  ORDER BY %[6]s
  LIMIT $3
), h AS MATERIALIZED (
  SELECT %[9]s AS k
  FROM %[2]s o
  WHERE %[1]s < (SELECT o0 FROM s) AND %[10]s
    AND CASE WHEN o.xmax <> '0' THEN %[9]s IN (SELECT k FROM c WHERE k <> '') AND o.ctid NOT IN %[11]s ELSE false END
), t AS MATERIALIZED (
  SELECT c.tid, c.k, c.n FROM c
  WHERE NOT c.foreign_claim AND c.tid NOT IN %[11]s AND c.k NOT IN (SELECT k FROM h)%[12]s
)`, p.order[0], p.table, p.retryJoin, where, "CASE WHEN "+lockedSQL+" OR o.ctid IN "+own+" THEN false ELSE "+p.inBucket+" END", orderBy, strings.Join(cols, ", "), p.inBucket,
		key, sq.Pending(p.l, "o"), own, held)

	list := make([]string, len(p.selectList))
	out := make([]string, len(p.selectList))
	for i, e := range p.selectList {
		list[i] = fmt.Sprintf("%s AS c%d", e, i)
		out[i] = fmt.Sprintf("c%d", i)
	}
	locked := func(lease string) string {
		where := sq.Pending(p.l, "o")
		if lease != "" {
			where += " AND " + lease
		}
		// passed: the rows tried before the last one locked that were not
		// locked (those after it were not tried).
		return fmt.Sprintf(`, m AS MATERIALIZED (
  SELECT t.n AS claim_n, t.k AS claim_k, %s
  FROM (SELECT * FROM t ORDER BY t.n) t JOIN %s o ON o.ctid = t.tid
  %s
  WHERE %s
  ORDER BY t.n
  LIMIT $2
  FOR UPDATE OF o SKIP LOCKED
), passed AS MATERIALIZED (
  SELECT t.n, t.k FROM t
  WHERE t.k <> '' AND t.n < (SELECT max(claim_n) FROM m) AND t.n NOT IN (SELECT claim_n FROM m)
)
SELECT %s
FROM m
WHERE NOT (m.claim_k IN (SELECT k FROM passed) AND EXISTS (SELECT 1 FROM passed p WHERE p.k = m.claim_k AND p.n < m.claim_n))
ORDER BY m.claim_n`, strings.Join(list, ",\n  "), p.table, p.retryJoin, where, strings.Join(out, ", "))
	}
	return claimSQL{
		settings: bucketClaimSettings,
		plain:    with + locked(""),
		fenced:   with + locked(leaseHeldSQL(p.rs, 5)),
		windowed: true,
		ownRows:  true,
	}
}

// lockedSQL is the condition that the row at o is locked, or being updated
// or deleted, by a transaction in progress: its xmax is one of the
// transactions the statement's snapshot sees running, or of those running
// as the statement began (pg_stat_activity: a transaction that took its
// id after the snapshot's horizon is not in the snapshot's list). A row
// locked by a transaction that began later, by a subtransaction or by
// several at once (a multixact) is not seen as locked; one locked by a
// transaction that ended since may be.
const lockedSQL = "o.xmax IN (SELECT xid(x) FROM pg_snapshot_xip(pg_current_snapshot()) x " +
	"UNION ALL SELECT a.backend_xid FROM pg_stat_activity a WHERE a.backend_xid IS NOT NULL)"

// inBucketSQL is the condition, for the claim of a bucket with ordering
// off, that the row at o is in the bucket (in, see sqlcore's InBucket) and
// not locked by a running transaction: rows locked (the batches in flight
// of every bucket, which the claim could not lock anyway) are passed over
// before their key is hashed, which costs more than the rest of reading a
// row.
func inBucketSQL(in string) string {
	return "CASE WHEN " + lockedSQL + " THEN false ELSE " + in + " END"
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
