package mysql

import (
	"fmt"
	"strings"
	"time"

	"github.com/outbox-relay/outbox-relay/internal/layout"
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
	claim         string // ? source, ? source, [window: ? source, ? source, ? window, twice,] [? source,] ? limit
	windowed      bool   // the claim reads a window (see windowSQL)
	settle        string // ? limit: the first pending rows, locked without skipping
	ackSets       string // SET list for a published row (not in delete mode); ? batch id, ? claim time when ackClaim
	ackClaim      bool   // the layout records the claim (state.batch_id, state.claimed_at) on delivery
	deadSets      string // SET list for a dead-lettered row (not in delete mode)
	retryCount    string // column to keep attempts in, or ""
	errorCol      string // column to keep the last error in, or ""
	pendingValues string // SET list that puts a row back in the pending set
	gauges        string // ? source
	stats         string // ? source, schema, table, last id, published, retried, dead, pending, lag
}

// col renders alias.column.
func col(alias, name string) string { return alias + "." + QuoteIdent(name) }

// asText renders an expression as utf8mb4 text.
func asText(expr string) string { return "CAST(" + expr + " AS CHAR CHARACTER SET utf8mb4)" }

// templateSQL renders a template as a text expression that is NULL when a
// reference finds its column, and every fallback, NULL or empty (CONCAT
// propagates NULL).
func templateSQL(t layout.Template, alias string) string {
	var parts []string
	for _, p := range t {
		if p.Column != "" {
			var alts []string
			for _, c := range p.Alternatives() {
				alts = append(alts, "NULLIF("+asText(col(alias, c))+", '')")
			}
			if len(alts) == 1 {
				parts = append(parts, alts[0])
			} else {
				parts = append(parts, "COALESCE("+strings.Join(alts, ", ")+")")
			}
		} else {
			parts = append(parts, quoteLiteral(p.Literal))
		}
	}
	switch len(parts) {
	case 0:
		return "NULL"
	case 1:
		return parts[0]
	}
	return "CONCAT(" + strings.Join(parts, ", ") + ")"
}

func templateOrNull(t layout.Template, alias string) string {
	if len(t) == 0 {
		return "NULL"
	}
	return templateSQL(t, alias)
}

func optText(alias, name string) string {
	if name == "" {
		return "NULL"
	}
	return asText(col(alias, name))
}

func optCol(alias, name string) string {
	if name == "" {
		return "NULL"
	}
	return col(alias, name)
}

// orderKeySQL is the row's order key: the first of the layout's order key
// templates that is neither NULL nor empty, else ”.
func orderKeySQL(l *layout.Layout, alias string) string {
	if len(l.OrderKeys) == 0 {
		return "''"
	}
	var parts []string
	for _, t := range l.OrderKeys {
		parts = append(parts, "NULLIF("+templateSQL(t, alias)+", '')")
	}
	return "COALESCE(" + strings.Join(parts, ", ") + ", '')"
}

// attemptsSQL is a row's failed attempts: the relay's retry state, else the
// table's own retry counter (which another relay may have kept), else 0.
func attemptsSQL(l *layout.Layout, retryAttempts string) string {
	if l.RetryCount == "" {
		return "COALESCE(" + retryAttempts + ", 0)"
	}
	return "COALESCE(" + retryAttempts + ", " + col("o", l.RetryCount) + ", 0)"
}

// nullIfEmpty makes an empty text NULL: an empty key is no key, empty
// headers are none.
func nullIfEmpty(expr string) string {
	if expr == "NULL" {
		return expr
	}
	return "NULLIF(" + expr + ", '')"
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
	c := col(alias, l.ID.Name)
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

// pendingPredicate is the WHERE condition of rows not yet delivered.
func pendingPredicate(l *layout.Layout, alias string) string {
	p := statePredicate(l, alias)
	if l.Errored.Name != "" {
		p += " AND " + col(alias, l.Errored.Name) + " = " + l.ErroredValue(false)
	}
	return p
}

func statePredicate(l *layout.Layout, alias string) string {
	switch l.Mode {
	case "flag":
		return col(alias, l.Flag) + " = FALSE"
	case "timestamp":
		return col(alias, l.PublishedAt) + " IS NULL"
	case "status":
		return col(alias, l.Status) + " = " + quoteLiteral(l.Pending)
	default: // delete: every row present is pending
		return "TRUE"
	}
}

const now = "UTC_TIMESTAMP(6)"

func buildStatements(l *layout.Layout, table, relayDB string, ordering bool, claimTimeout time.Duration, index string) statements {
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
	selectList := []string{
		idTextSQL(l, "o"),
		col("o", l.Payload.Name),
		templateSQL(l.Topic, "o"),
		nullIfEmpty(templateOrNull(l.Key, "o")),
		templateOrNull(l.PartitionKey, "o"),
		orderKeySQL(l, "o"),
		nullIfEmpty(optCol("o", l.Headers)),
		optText("o", l.EventType),
		optText("o", l.AggregateType),
		optText("o", l.AggregateID),
		optCol("o", l.CreatedAt),
		optCol("o", l.MaxRetries),
		attemptsSQL(l, "(SELECT r.attempts FROM "+retryRow+")"),
		now, // the claim's time, recorded on delivery when the layout keeps claims
	}
	for _, t := range l.Extra {
		selectList = append(selectList, templateSQL(t, "o"))
	}
	where := []string{
		pendingPredicate(l, "o"),
		"NOT EXISTS (SELECT 1 FROM " + retryRow + " AND r.next_attempt_at > " + now + ")",
	}
	if l.BatchID.Name != "" {
		// A row another relay marked claimed is skipped until its claim
		// is older than the claim timeout: that relay died mid-batch.
		claimed := col("o", l.ClaimedAt.Name)
		where = append(where, fmt.Sprintf("(%s IS NULL OR %s IS NULL OR %s < %s - INTERVAL %d MICROSECOND)",
			col("o", l.BatchID.Name), claimed, claimed, now, claimTimeout.Microseconds()))
	}
	if l.BatchID.Name != "" && ordering {
		// A row another relay claimed, within the claim timeout, holds its
		// key: the rows after it wait until it is delivered or its claim
		// expires (then it is claimed here, first). Such rows are looked
		// for in the claim's window alone, read once per claim: the first
		// rows in the claim's order that could be claimed (see
		// windowSQL). Every row before a claimable row is in it, so a row
		// of the window decides; the claim goes no further than the
		// window's last row. Looked up row by row, the claimed rows were
		// read once per row considered (a claim of 1,000 over 20,000
		// pending rows took 12 s), and read once per claim from the whole
		// table, once per claim for every pending row.
		win := windowSQL(l, table, rs, force, claimTimeout)
		where = append(where, fmt.Sprintf(`NOT EXISTS (SELECT 1 FROM (%s) h
    WHERE h.fc AND h.k = %s AND h.k <> '' AND (h.ob, h.id) < (%s, %s))`,
			win, orderKeySQL(l, "o"), col("o", l.OrderBy), col("o", l.ID.Name)),
			fmt.Sprintf("(%s, %s) <= (SELECT w.ob, w.id FROM (%s) w ORDER BY w.ob DESC, w.id DESC LIMIT 1)",
				col("o", l.OrderBy), col("o", l.ID.Name), win))
		s.windowed = true
	}
	if ordering {
		where = append(where, heldKeySQL(l, "o", rs))
	}
	orderBy := col("o", l.OrderBy)
	if l.OrderBy != l.ID.Name {
		orderBy += ", " + col("o", l.ID.Name)
	}
	s.claim = fmt.Sprintf(`SELECT %s
FROM %s o%s
WHERE %s
ORDER BY %s
LIMIT ?
FOR UPDATE SKIP LOCKED`, strings.Join(selectList, ",\n  "), table, force, strings.Join(where, "\n  AND "), orderBy)

	s.settle = fmt.Sprintf("SELECT 1 FROM %s o%s WHERE %s ORDER BY %s LIMIT ? FOR UPDATE", table, force,
		pendingPredicate(l, "o"), orderBy)

	setPublished, setDead, setPending := stateSets(l)
	s.ackSets = setPublished
	if l.BatchID.Name != "" && l.Mode != "delete" {
		// The claim is recorded as the original relay records it: the
		// batch's id and when it was claimed.
		s.ackSets += ", " + QuoteIdent(l.BatchID.Name) + " = ?, " + QuoteIdent(l.ClaimedAt.Name) + " = ?"
		s.ackClaim = true
	}
	s.deadSets = setDead
	s.retryCount, s.errorCol = l.RetryCount, l.Error
	s.pendingValues = setPending

	backlogAge := "NULL"
	if l.CreatedAt != "" {
		backlogAge = "TIMESTAMPDIFF(MICROSECOND, MIN(" + col("o", l.CreatedAt) + "), " + now + ")"
	}
	s.gauges = "SELECT COUNT(*), " + backlogAge + ", (SELECT COUNT(*) FROM " + rs +
		".failed_events WHERE source = ? AND replayed_at IS NULL)\nFROM " + table + " o WHERE " + pendingPredicate(l, "o")
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
		orderKeySQL(l, alias) + fmt.Sprintf(", %d)", maxOrderKeyLen) + binCollation + " AND b.order_key <> '' AND b.next_attempt_at > " + now + ")"
}

// windowSQL reads a claim's window (? source, ? source, ? window): the first
// pending rows in the claim's order that neither back off nor belong to a
// held key, read by the claim's index (a scan that stops at the window,
// locking nothing: a subquery of a locking read takes no locks), with each
// row's order key (k), order (ob, id) and whether another relay holds it
// claimed (fc).
func windowSQL(l *layout.Layout, table, rs, force string, claimTimeout time.Duration) string {
	claimed := col("f", l.ClaimedAt.Name)
	return fmt.Sprintf(`SELECT %s AS k, %s AS ob, %s AS id,
      (%s IS NOT NULL AND %s IS NOT NULL AND %s >= %s - INTERVAL %d MICROSECOND) AS fc
      FROM %s f%s
      WHERE %s
        AND NOT EXISTS (SELECT 1 FROM %s.retry_state r WHERE r.source = ? AND r.event_id = %s%s AND r.next_attempt_at > %s)
        AND %s
      ORDER BY %s, %s
      LIMIT ?`,
		orderKeySQL(l, "f"), col("f", l.OrderBy), col("f", l.ID.Name),
		col("f", l.BatchID.Name), claimed, claimed, now, claimTimeout.Microseconds(),
		table, force, pendingPredicate(l, "f"), rs, idTextSQL(l, "f"), binCollation, now,
		heldKeySQL(l, "f", rs), col("f", l.OrderBy), col("f", l.ID.Name))
}

// stateSets returns the SET lists for a published row, a dead-lettered row
// and a row put back in the pending set (replay), less the error column's
// reset.
func stateSets(l *layout.Layout) (published, dead, pending string) {
	var pub, dd, pend []string
	switch l.Mode {
	case "flag":
		pub = append(pub, QuoteIdent(l.Flag)+" = TRUE")
		// A dead-lettered row leaves the pending set with its published
		// timestamp still NULL; failed_events says why.
		dd = append(dd, QuoteIdent(l.Flag)+" = TRUE")
		pend = append(pend, QuoteIdent(l.Flag)+" = FALSE")
	case "status":
		pub = append(pub, QuoteIdent(l.Status)+" = "+quoteLiteral(l.Published))
		dd = append(dd, QuoteIdent(l.Status)+" = "+quoteLiteral(l.Failed))
		pend = append(pend, QuoteIdent(l.Status)+" = "+quoteLiteral(l.Pending))
	case "timestamp":
		// Without an errored flag the timestamp is the only state there
		// is: a dead letter takes it out of the pending set with the
		// dead-letter mark, not a delivery time (see layout.DeadLetterMark).
		if l.Errored.Name == "" {
			dd = append(dd, QuoteIdent(l.PublishedAt)+" = '"+layout.DeadLetterMark+"'")
		}
	}
	if l.Errored.Name != "" {
		// The flag alone takes a dead letter out of the pending set; a
		// flag or timestamp column keeps saying it was never published.
		if l.Mode == "flag" {
			dd = dd[:0]
		}
		dd = append(dd, QuoteIdent(l.Errored.Name)+" = "+l.ErroredValue(true))
		pend = append(pend, QuoteIdent(l.Errored.Name)+" = "+l.ErroredValue(false))
	}
	if l.PublishedAt != "" {
		pub = append(pub, QuoteIdent(l.PublishedAt)+" = "+now)
		pend = append(pend, QuoteIdent(l.PublishedAt)+" = NULL")
	}
	if l.RetryCount != "" {
		pend = append(pend, QuoteIdent(l.RetryCount)+" = 0")
	}
	// The error column's reset depends on its type and is added by Replay
	// (see errorReset).
	if l.BatchID.Name != "" {
		pend = append(pend, QuoteIdent(l.BatchID.Name)+" = NULL", QuoteIdent(l.ClaimedAt.Name)+" = NULL")
	}
	return strings.Join(pub, ", "), strings.Join(dd, ", "), strings.Join(pend, ", ")
}

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
