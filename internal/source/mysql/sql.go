package mysql

import (
	"fmt"
	"strings"
	"time"

	"github.com/outbox-relay/outbox-relay/internal/layout"
	"github.com/outbox-relay/outbox-relay/internal/source"
	"github.com/outbox-relay/outbox-relay/internal/source/sqlcore"
)

// Relay tables compare text under one collation, whatever the outbox
// table's: utf8mb4_bin, so that ids and keys match byte for byte and no
// "illegal mix of collations" can arise.
const binCollation = " COLLATE utf8mb4_bin"

// maxOrderKeyLen is the length of retry_state.order_key: longer keys are
// cut there, both where they are stored and where they are compared.
const maxOrderKeyLen = 500

// statements is the SQL of one source, built once from its layout. Lists
// of ids are appended at run time (see inList).
type statements struct {
	// claim is the claim of a table without a window: ? source (attempts),
	// ? source (backoff), [? source (held keys),] ? limit.
	claim string
	// window, when set, reads a claim's window (see windowSQL): [ids in
	// place of ownMarker,] ? source, [? source,] ? window size; claimIDs
	// then locks rows of it by id: ?
	// source (attempts), the ids (in place of idsMarker), ? source, [?
	// source].
	window, claimIDs string
	// settle locks the first pending rows without skipping: ? limit, or,
	// with a window, the window's ids in place of idsMarker.
	settle        string
	ackSets       string // SET list for a published row (not in delete mode); ? batch id, ? claim time when ackClaim
	ackClaim      bool   // the layout records the claim (state.batch_id, state.claimed_at) on delivery
	deadSets      string // SET list for a dead-lettered row (not in delete mode)
	pendingValues string // SET list that puts a row back in the pending set
	gauges        string // ? source
	stats         string // ? source, schema, table, last id, published, retried, dead, pending, lag
}

// attemptsSQL is a row's failed attempts: the relay's retry state, else the
// table's own retry counter (which another relay may have kept), else 0.
func attemptsSQL(l *layout.Layout, retryAttempts string) string {
	if l.RetryCount == "" {
		return "COALESCE(" + retryAttempts + ", 0)"
	}
	return "COALESCE(" + retryAttempts + ", " + sq.Col("o", l.RetryCount) + ", 0)"
}

// idKind is how ids of a column travel between SQL and Go: integers as
// numbers, binary ids as lower-case hex, everything else as text.
type idKind int

const (
	idText idKind = iota
	idSigned
	idUnsigned
	idBinary
)

func kindOf(c layout.Column) idKind {
	t := strings.ToLower(c.Type)
	for _, p := range []string{"tinyint", "smallint", "mediumint", "int", "bigint"} {
		if strings.HasPrefix(t, p) {
			if strings.Contains(t, "unsigned") {
				return idUnsigned
			}
			return idSigned
		}
	}
	if isBinaryType(t) {
		return idBinary
	}
	return idText
}

// isBinaryType says whether a column type holds bytes rather than text.
func isBinaryType(t string) bool {
	t = strings.ToLower(t)
	for _, p := range []string{"binary", "varbinary", "tinyblob", "blob", "mediumblob", "longblob"} {
		if t == p || strings.HasPrefix(t, p+"(") {
			return true
		}
	}
	return false
}

// idTextSQL renders the id column as the event id text.
func idTextSQL(l *layout.Layout, alias string) string {
	c := sq.Col(alias, l.ID.Name)
	if kindOf(l.ID) == idBinary {
		return "LOWER(HEX(" + c + "))"
	}
	return asText(c)
}

// idValueSQL turns an event id text expression back into the id column's
// type, for comparing with the column itself.
func idValueSQL(l *layout.Layout, expr string) string {
	switch kindOf(l.ID) {
	case idSigned:
		return "CAST(" + expr + " AS SIGNED)"
	case idUnsigned:
		return "CAST(" + expr + " AS UNSIGNED)"
	case idBinary:
		return "UNHEX(" + expr + ")"
	}
	return expr
}

const now = "UTC_TIMESTAMP(6)"

func buildStatements(l *layout.Layout, table, relayDB string, ordering bool, claimTimeout time.Duration, index, pendingIndex string, bucket source.Bucket, prio *source.Priority) statements {
	rs := QuoteIdent(relayDB)
	var s statements
	// The retry state is read in subqueries, never joined: a locking read
	// locks the rows of every table in its FROM clause (MariaDB has no FOR
	// UPDATE OF), and a claim holding retry_state rows while its batch is
	// published blocked the completion of the batch before it, which the
	// engine completes first: both waited for innodb_lock_wait_timeout.
	// Subqueries of a locking read take no locks.
	retryRow := rs + ".retry_state r WHERE r.source = ? AND r.event_id = " + idTextSQL(l, "o") + binCollation
	force := ""
	if index != "" {
		force = " FORCE INDEX (" + QuoteIdent(index) + ")"
	}
	c := sq.Row(l, "o")
	c.ID = idTextSQL(l, "o")
	c.Payload = sq.Col("o", l.Payload.Name)
	c.Headers = sqlcore.NullIfEmpty(sq.OptCol("o", l.Headers))
	c.CreatedAt = sq.OptCol("o", l.CreatedAt)
	c.MaxRetries = sq.OptCol("o", l.MaxRetries)
	c.Attempts = attemptsSQL(l, "(SELECT r.attempts FROM "+retryRow+")")
	// The claim's time, recorded on delivery when the layout keeps claims.
	selectList := sq.List(c, l, "o", now)
	where := []string{
		sq.Pending(l, "o"),
		"NOT EXISTS (SELECT 1 FROM " + retryRow + " AND r.next_attempt_at > " + now + ")",
	}
	if l.BatchID.Name != "" {
		// A row another relay marked claimed is skipped until its claim
		// is older than the claim timeout: that relay died mid-batch.
		claimed := sq.Col("o", l.ClaimedAt.Name)
		where = append(where, fmt.Sprintf("(%s IS NULL OR %s IS NULL OR %s < %s - INTERVAL %d MICROSECOND)",
			sq.Col("o", l.BatchID.Name), claimed, claimed, now, claimTimeout.Microseconds()))
	}
	if ordering {
		where = append(where, heldKeySQL(l, "o", rs))
	}
	orderBy := sq.Col("o", l.OrderBy)
	if l.OrderBy != l.ID.Name {
		orderBy += ", " + sq.Col("o", l.ID.Name)
	}
	foreign := l.BatchID.Name != "" && ordering
	if pendingIndex != "" || foreign || bucket.Split() || prio != nil {
		// The claim reads a window first (a plain read, locking nothing),
		// then locks rows of it by their ids (see Store.claimWindow): the
		// rows a claim considers are the window's, read by an index that
		// holds the pending rows together in the claim's order when the
		// table has one, however many delivered rows the table keeps. A
		// locking read by such an index is what must not be done (claims
		// then passed over a row due again while a later row of its key
		// was claimed, see ClaimIndex), and a locking read whose rows are
		// sorted after they are read locks every row it reads, not the
		// LIMIT it returns.
		winForce := force
		if pendingIndex != "" {
			winForce = " FORCE INDEX (" + QuoteIdent(pendingIndex) + ")"
		}
		// A bucket's claims read their window through it too: the window
		// keeps the bucket's rows, and the claim tells the rows it could
		// not lock (see Store.claim).
		s.window = windowSQL(l, table, rs, winForce, claimTimeout, ordering, foreign, sq.InBucket(l, "f", idTextSQL(l, "f"), ordering, bucket), prio)
		if prio != nil {
			s.window = rankedWindowSQL(s.window, ordering)
		}
		s.claimIDs = fmt.Sprintf(`SELECT %s
FROM %s o FORCE INDEX (PRIMARY)
WHERE %s IN (`+idsMarker+`)
  AND %s
ORDER BY %s
FOR UPDATE SKIP LOCKED`, strings.Join(selectList, ",\n  "), table, sq.Col("o", l.ID.Name), strings.Join(where, "\n  AND "), orderBy)
	} else {
		s.claim = fmt.Sprintf(`SELECT %s
FROM %s o%s
WHERE %s
ORDER BY %s
LIMIT ?
FOR UPDATE SKIP LOCKED`, strings.Join(selectList, ",\n  "), table, force, strings.Join(where, "\n  AND "), orderBy)
	}

	if s.window != "" {
		// The window's rows, waited for by primary key.
		s.settle = "SELECT 1 FROM " + table + " o FORCE INDEX (PRIMARY) WHERE " + sq.Col("o", l.ID.Name) + " IN (" + idsMarker + ") FOR UPDATE"
	} else {
		s.settle = fmt.Sprintf("SELECT 1 FROM %s o%s WHERE %s ORDER BY %s LIMIT ? FOR UPDATE", table, force,
			sq.Pending(l, "o"), orderBy)
	}

	setPublished, setDead, setPending := sq.StateSets(l)
	s.ackSets = setPublished
	if l.BatchID.Name != "" && l.Mode != "delete" {
		// The claim is recorded as the original relay records it: the
		// batch's id and when it was claimed.
		s.ackSets += ", " + QuoteIdent(l.BatchID.Name) + " = ?, " + QuoteIdent(l.ClaimedAt.Name) + " = ?"
		s.ackClaim = true
	}
	s.deadSets = setDead
	s.pendingValues = setPending

	backlogAge := "NULL"
	if l.CreatedAt != "" {
		backlogAge = "TIMESTAMPDIFF(MICROSECOND, MIN(" + sq.Col("o", l.CreatedAt) + "), " + now + ")"
	}
	s.gauges = "SELECT COUNT(*), " + backlogAge + ", (SELECT COUNT(*) FROM " + rs +
		".failed_events WHERE source = ? AND replayed_at IS NULL)\nFROM " + table + " o WHERE " + sq.Pending(l, "o")
	s.stats = `INSERT INTO ` + rs + `.relay_state (source, schema_name, table_name, last_poll_time, last_published_event_id,
  total_events_published, total_events_retried, total_events_dead_lettered, pending_events, lag_seconds, created_at, updated_at,
  owner, last_claim_at, events_per_second, sink_states)
VALUES (?, ?, ?, COALESCE(?, ` + now + `), NULLIF(?, ''), ?, ?, ?, ?, ?, ` + now + `, ` + now + `, NULLIF(?, ''), ?, ?, ?)
ON DUPLICATE KEY UPDATE last_poll_time = VALUES(last_poll_time),
  owner = VALUES(owner), last_claim_at = VALUES(last_claim_at),
  events_per_second = VALUES(events_per_second), sink_states = VALUES(sink_states),
  last_published_event_id = COALESCE(VALUES(last_published_event_id), last_published_event_id),
  total_events_published = total_events_published + VALUES(total_events_published),
  total_events_retried = total_events_retried + VALUES(total_events_retried),
  total_events_dead_lettered = total_events_dead_lettered + VALUES(total_events_dead_lettered),
  pending_events = VALUES(pending_events), lag_seconds = VALUES(lag_seconds), updated_at = VALUES(updated_at)`
	return s
}

// heldKeySQL is the condition that the key of the row at alias is not held
// by a row of it backing off (? source); rows without a key (order key ”)
// hold nothing.
func heldKeySQL(l *layout.Layout, alias, rs string) string {
	return "NOT EXISTS (SELECT 1 FROM " + rs + ".retry_state b WHERE b.source = ? AND b.order_key = LEFT(" +
		sq.OrderKey(l, alias) + fmt.Sprintf(", %d)", maxOrderKeyLen) + binCollation + " AND b.order_key <> '' AND b.next_attempt_at > " + now + ")"
}

// windowSQL reads a claim's window ([the ids of the store's rows in
// flight, for a bucket,] ? source, [? source,] ? window): the
// first pending rows in the claim's order that neither back off nor, with
// ordering, belong to a held key, and that are in the store's bucket
// (inBucket, "" for the whole source), read by force (the pending index,
// else the claim's), locking nothing, with each row's id as text, its order
// key and whether another relay holds it claimed (always false unless
// foreign).
func windowSQL(l *layout.Layout, table, rs, force string, claimTimeout time.Duration, ordering, foreign bool, inBucket string, prio *source.Priority) string {
	more := ""
	if prio != nil {
		// For rankedWindowSQL: the row's place in the order, and its class.
		more = ", " + sq.Col("f", l.OrderBy) + " AS o0, " + sq.Col("f", l.ID.Name) + " AS o1, " + sq.ClassRank("f", prio) + " AS cls"
	}
	fc := "FALSE"
	if foreign {
		claimed := sq.Col("f", l.ClaimedAt.Name)
		fc = fmt.Sprintf("(%s IS NOT NULL AND %s IS NOT NULL AND %s >= %s - INTERVAL %d MICROSECOND)",
			sq.Col("f", l.BatchID.Name), claimed, claimed, now, claimTimeout.Microseconds())
	}
	held := ""
	if ordering {
		held = "\n  AND " + heldKeySQL(l, "f", rs)
	}
	pending := sq.Pending(l, "f")
	if inBucket != "" {
		// A bucket's window leaves out the store's rows in flight (the
		// ids in place of ownMarker, see Store.windowRows), then hashes
		// the key of each row before the retry state is probed for it:
		// most of the rows it reads are other buckets'.
		pending += ownMarker + "\n  AND " + inBucket
	}
	return fmt.Sprintf(`SELECT %s AS id, %s AS k, %s AS fc%s
FROM %s f%s
WHERE %s
  AND NOT EXISTS (SELECT 1 FROM %s.retry_state r WHERE r.source = ? AND r.event_id = %s%s AND r.next_attempt_at > %s)%s
ORDER BY %s, %s
LIMIT ?`,
		idTextSQL(l, "f"), sq.OrderKey(l, "f"), fc, more,
		table, force, pending, rs, idTextSQL(l, "f"), binCollation, now, held,
		sq.Col("f", l.OrderBy), sq.Col("f", l.ID.Name))
}

// rankedWindowSQL reads window (windowSQL's, with a priority) ranked by
// the priority (see source.Priority): its rows by their rank, then in the
// claim's order; with ordering, a row's rank is the best of its key's rows
// from it on (sqlcore's EffectiveRank), so that every row of a key still
// comes after the earlier ones.
func rankedWindowSQL(window string, ordering bool) string {
	rank := "cls"
	if ordering {
		rank = sqlcore.EffectiveRank("cls", "k", []string{"o0", "o1"})
	}
	return fmt.Sprintf("SELECT id, k, fc FROM (\nSELECT id, k, fc, o0, o1, %s AS rnk FROM (\n%s\n) w\n) p\nORDER BY rnk, o0, o1", rank, window)
}

// ownMarker stands in a bucket's window for the condition that leaves out
// the rows of the store's batches in flight: "AND id NOT IN (...)", or
// nothing.
const ownMarker = "/*own*/"

// idsMarker stands in claimIDs for the placeholders of the ids it locks.
const idsMarker = "/*ids*/"

// placeholders returns "?, ?, ..." for n values, each wrapped by wrap (a
// format with one %s) when it is not empty.
func placeholders(n int, wrap string) string {
	p := "?"
	if wrap != "" {
		p = fmt.Sprintf(wrap, "?")
	}
	var b strings.Builder
	for i := range n {
		if i > 0 {
			b.WriteString(", ")
		}
		b.WriteString(p)
	}
	return b.String()
}
