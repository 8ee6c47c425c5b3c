package postgres

import (
	"strings"
	"time"

	"github.com/jackc/pgx/v5"

	"github.com/outbox-relay/outbox-relay/internal/layout"
)

// QuoteIdent quotes one SQL identifier.
func QuoteIdent(s string) string { return pgx.Identifier{s}.Sanitize() }

// quoteLiteral quotes a string constant. Layout values (status names) are
// inlined rather than bound so that partial indexes such as
// "WHERE status = 'pending'" match the claim query's plan.
func quoteLiteral(s string) string { return "'" + strings.ReplaceAll(s, "'", "''") + "'" }

// statements is the SQL of one source, built once from its layout.
type statements struct {
	claim         string
	claimFenced   string // claim, under a lease ($3 shard, $4 owner, $5 term)
	ack           string // $1 ctids, and $2 the batch id when the layout records claims
	ackBatchID    bool
	markByID      string // $1 ids, and $2 the batch id when the layout records claims: published if still pending
	dead          string // $1 ids, $2 reasons
	retryRow      string // $1 ids, $2 attempts, $3 errors; empty when the table has no retry columns
	retryState    string // $1 source, $2 ids, $3 order keys, $4 attempts, $5 next, $6 errors
	clearRetry    string // $1 source, $2 ids
	insertDead    string
	stats         string // $1 source, $2 schema, $3 table, $4 last id, $5-$7 counts
	pendingValues string // SET list that puts a row back in the pending set
}

// col renders alias.column.
func col(alias, name string) string { return alias + "." + QuoteIdent(name) }

// templateSQL renders a template as a text expression that is NULL when a
// reference finds its column, and every fallback, NULL or empty.
func templateSQL(t layout.Template, alias string) string {
	var parts []string
	for _, p := range t {
		if p.Column != "" {
			var alts []string
			for _, c := range p.Alternatives() {
				alts = append(alts, "NULLIF("+col(alias, c)+"::text, '')")
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
		return "NULL::text"
	case 1:
		if len(t.Columns()) == 0 {
			return parts[0] + "::text"
		}
		return parts[0]
	}
	return "(" + strings.Join(parts, " || ") + ")"
}

// payloadSQL selects the payload as its bytes: JSON types as their text
// (jsonb's binary form carries a version byte), bytea raw, text as is.
func payloadSQL(l *layout.Layout, alias string) string {
	c := col(alias, l.Payload.Name)
	if l.Payload.Type == "bytea" {
		return c
	}
	return c + "::text"
}

func orDefault(expr string) string {
	if expr == "" {
		return "NULL"
	}
	return expr
}

func optCol(alias, name, cast string) string {
	if name == "" {
		return "NULL" + cast
	}
	return col(alias, name) + cast
}

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

// pendingPredicate is the WHERE condition of rows not yet delivered nor
// dead-lettered.
func pendingPredicate(l *layout.Layout, alias string) string {
	var p string
	switch l.Mode {
	case "flag":
		p = col(alias, l.Flag) + " = false"
	case "timestamp":
		p = col(alias, l.PublishedAt) + " IS NULL"
	case "status":
		p = col(alias, l.Status) + " = " + quoteLiteral(l.Pending)
	default: // delete: every row present is pending
		p = "true"
	}
	if l.Errored.Name != "" {
		p += " AND " + col(alias, l.Errored.Name) + " = " + l.ErroredValue(false)
	}
	return p
}

// attemptsSQL is a row's failed attempts: the relay's retry state, else the
// table's own retry counter (which another relay may have kept), else 0.
func attemptsSQL(l *layout.Layout) string {
	if l.RetryCount == "" {
		return "COALESCE(r.attempts, 0)"
	}
	return "COALESCE(r.attempts, " + col("o", l.RetryCount) + "::int, 0)"
}

// nullIfEmpty makes an empty text NULL: an empty key is no key, empty
// headers are none.
func nullIfEmpty(expr string) string {
	if expr == "" {
		return ""
	}
	return "NULLIF(" + expr + ", '')"
}

func optColIfSet(alias, name, cast string) string {
	if name == "" {
		return ""
	}
	return col(alias, name) + cast
}

// tieSQL is a row's position among the rows its transaction inserted: the
// command id of the inserting statement, kept in the retry state once the
// relay has updated the row (its new version carries the relay's).
const tieSQL = "COALESCE(r.tie, o.cmin::text::bigint)"

// xidBarrier is the oldest transaction still running, relays' sessions
// (application_name "outbox-relay ...") left out, else the next one to
// start: a row whose transaction id is below it has committed or rolled
// back, and so has every row of a transaction older than it.
const xidBarrier = `COALESCE((SELECT min(x) FROM pg_snapshot_xip(pg_current_snapshot()) x
    WHERE x::text::bigint % 4294967296 NOT IN (SELECT a.backend_xid::text::bigint FROM pg_stat_activity a
      WHERE a.backend_xid IS NOT NULL AND a.application_name LIKE 'outbox-relay %')),
    pg_snapshot_xmax(pg_current_snapshot()))`

// rowSelect is the select list of a claimed row, in the order decodeRow
// reads (see the col constants), the layout's extras last. attempts is the
// row's failed attempts; ctid, tie and retrying are the claim's own columns.
func rowSelect(l *layout.Layout, alias, attempts, ctid, tie, retrying string) []string {
	out := []string{
		col(alias, l.ID.Name) + "::text",
		payloadSQL(l, alias),
		templateSQL(l.Topic, alias),
		orDefault(nullIfEmpty(templateIfSetAt(l.Key, alias))),
		orDefault(templateIfSetAt(l.PartitionKey, alias)),
		orderKeySQL(l, alias),
		orDefault(nullIfEmpty(optColIfSet(alias, l.Headers, "::text"))),
		optCol(alias, l.EventType, "::text"),
		optCol(alias, l.AggregateType, "::text"),
		optCol(alias, l.AggregateID, "::text"),
		optCol(alias, l.CreatedAt, "::timestamptz"),
		optCol(alias, l.MaxRetries, "::int"),
		attempts,
		ctid,
		tie,
		retrying,
	}
	for _, t := range l.Extra {
		out = append(out, templateSQL(t, alias))
	}
	return out
}

// RowSelect is the select list of a row of table alias for DecodeRow, for a
// store whose claims keep no physical address nor retry state (the queue):
// attempts is the row's failed attempts.
func RowSelect(l *layout.Layout, alias, attempts string) []string {
	return rowSelect(l, alias, attempts, "NULL::tid", "0::bigint", "false")
}

func buildStatements(l *layout.Layout, table, relaySchema string, ordering bool, claimTimeout time.Duration) statements {
	rs := QuoteIdent(relaySchema)
	id := col("o", l.ID.Name)
	idArr := "$1::text[]::" + l.ID.Type + "[]"
	var s statements

	s.claim, s.claimFenced = claimStatements(l, table, relaySchema, ordering, claimTimeout)

	// Published rows are found by their ctid: a TID scan, whatever the
	// planner thinks of the table's size (a generic plan made while the
	// table looked empty once turned id = ANY(...) into a sequential scan
	// per batch). The rows are locked by the claim, so their ctids hold.
	setPublished, setDead, setPending := stateSets(l)
	if l.Mode == "delete" {
		s.ack = "DELETE FROM " + table + " o WHERE o.ctid = ANY($1::tid[])"
		s.markByID = "DELETE FROM " + table + " o WHERE " + id + " = ANY(" + idArr + ")"
		s.dead = "DELETE FROM " + table + " o WHERE " + id + " = ANY(" + idArr + ")"
	} else {
		if l.BatchID.Name != "" {
			// The claim is recorded as the original relay records it:
			// the batch's id and when it was claimed (the transaction's
			// start, now()).
			setPublished += ", " + QuoteIdent(l.BatchID.Name) + " = $2::text::" + l.BatchID.Type +
				", " + QuoteIdent(l.ClaimedAt.Name) + " = now()"
			s.ackBatchID = true
		}
		s.ack = "UPDATE " + table + " o SET " + setPublished + " WHERE o.ctid = ANY($1::tid[])"
		s.markByID = "UPDATE " + table + " o SET " + setPublished + " WHERE " + id + " = ANY(" + idArr + ") AND " + pendingPredicate(l, "o")
		deadSet := setDead
		if l.Error != "" {
			deadSet += ", " + QuoteIdent(l.Error) + " = u.reason"
		}
		if l.RetryCount != "" {
			deadSet += ", " + QuoteIdent(l.RetryCount) + " = LEAST(u.attempts, 32767)"
		}
		s.dead = "UPDATE " + table + " o SET " + deadSet +
			" FROM unnest($1::text[], $2::text[], $3::int[]) AS u(id, reason, attempts) WHERE " + id + " = u.id::" + l.ID.Type
	}
	s.pendingValues = setPending

	if l.RetryCount != "" || l.Error != "" {
		var sets []string
		if l.RetryCount != "" {
			sets = append(sets, QuoteIdent(l.RetryCount)+" = LEAST(u.attempts, 32767)")
		}
		if l.Error != "" {
			sets = append(sets, QuoteIdent(l.Error)+" = u.err")
		}
		s.retryRow = "UPDATE " + table + " o SET " + strings.Join(sets, ", ") +
			" FROM unnest($1::text[], $2::int[], $3::text[]) AS u(id, attempts, err) WHERE " + id + " = u.id::" + l.ID.Type
	}
	s.retryState = `INSERT INTO ` + rs + `.retry_state AS t (source, event_id, order_key, attempts, next_attempt_at, last_error, tie)
SELECT $1, u.* FROM unnest($2::text[], $3::text[], $4::int[], $5::timestamptz[], $6::text[], $7::bigint[]) AS u
ON CONFLICT (source, event_id) DO UPDATE SET order_key = excluded.order_key, attempts = excluded.attempts,
  next_attempt_at = excluded.next_attempt_at, last_error = excluded.last_error, updated_at = now()`
	s.clearRetry = `DELETE FROM ` + rs + `.retry_state WHERE source = $1 AND event_id = ANY($2::text[])`

	// Dead letters keep the route as rendered and the whole row (row_data)
	// so that a replay can restore a row the layout deletes.
	s.insertDead = `INSERT INTO ` + rs + `.failed_events (original_event_id, source, source_schema, source_table,
  event_type, topic, event_key, partition_key, headers, payload, payload_raw, row_data,
  failure_reason, failure_count, first_failed_at, last_failed_at)
SELECT u.id, $1, $2, $3, COALESCE(u.event_type, ''), u.topic, u.event_key, u.partition_key,
  CASE WHEN u.headers IS NOT NULL AND u.headers <> '' THEN u.headers::jsonb END,
  CASE WHEN u.is_json THEN convert_from(u.payload, 'UTF8')::jsonb END,
  CASE WHEN NOT u.is_json THEN u.payload END,
  to_jsonb(o), u.reason, u.attempts, COALESCE(r.first_failed_at, now()), now()
FROM unnest($4::text[], $5::text[], $6::text[], $7::text[], $8::text[], $9::text[], $10::bytea[], $11::bool[], $12::text[], $13::int[])
  AS u(id, event_type, topic, event_key, partition_key, headers, payload, is_json, reason, attempts)
JOIN ` + table + ` o ON ` + id + ` = u.id::` + l.ID.Type + `
LEFT JOIN ` + rs + `.retry_state r ON r.source = $1 AND r.event_id = u.id`

	created := "NULL::timestamptz AS min"
	if l.CreatedAt != "" {
		created = "min(" + col("o", l.CreatedAt) + ")::timestamptz AS min"
	}
	backlog := "SELECT count(*), " + created + " FROM " + table + " o WHERE " + pendingPredicate(l, "o")
	s.stats = StatsStatement(relaySchema, backlog)
	return s
}

func templateIfSet(t layout.Template) string { return templateIfSetAt(t, "o") }

func templateIfSetAt(t layout.Template, alias string) string {
	if len(t) == 0 {
		return ""
	}
	return templateSQL(t, alias)
}

// stateSets returns the SET lists for a published row, a dead-lettered row and
// a row put back in the pending set (replay).
func stateSets(l *layout.Layout) (published, dead, pending string) {
	var pub, dd, pend []string
	switch l.Mode {
	case "flag":
		pub = append(pub, QuoteIdent(l.Flag)+" = true")
		// A dead-lettered row leaves the pending set with its published
		// timestamp still NULL; failed_events says why.
		dd = append(dd, QuoteIdent(l.Flag)+" = true")
		pend = append(pend, QuoteIdent(l.Flag)+" = false")
	case "status":
		pub = append(pub, QuoteIdent(l.Status)+" = "+quoteLiteral(l.Published))
		dd = append(dd, QuoteIdent(l.Status)+" = "+quoteLiteral(l.Failed))
		pend = append(pend, QuoteIdent(l.Status)+" = "+quoteLiteral(l.Pending))
	case "timestamp":
		// Without an errored flag the timestamp is the only state there
		// is: a dead letter takes it out of the pending set with the
		// dead-letter mark, not a delivery time (see layout.DeadLetterMark).
		if l.Errored.Name == "" {
			dd = append(dd, QuoteIdent(l.PublishedAt)+" = '"+layout.DeadLetterMark+"+00'")
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
		pub = append(pub, QuoteIdent(l.PublishedAt)+" = statement_timestamp()")
		pend = append(pend, QuoteIdent(l.PublishedAt)+" = NULL")
	}
	if l.RetryCount != "" {
		pend = append(pend, QuoteIdent(l.RetryCount)+" = 0")
	}
	if l.Error != "" {
		// The column's default: NULL, or '' for a NOT NULL column.
		pend = append(pend, QuoteIdent(l.Error)+" = DEFAULT")
	}
	if l.BatchID.Name != "" {
		pend = append(pend, QuoteIdent(l.BatchID.Name)+" = NULL", QuoteIdent(l.ClaimedAt.Name)+" = NULL")
	}
	return strings.Join(pub, ", "), strings.Join(dd, ", "), strings.Join(pend, ", ")
}

// StatsStatement is the statement RecordStats runs: backlog is a query of
// the pending rows' count and oldest creation time (NULL if unknown).
func StatsStatement(relaySchema, backlog string) string {
	rs := QuoteIdent(relaySchema)
	return `WITH b AS (` + backlog + `),
d AS (SELECT count(*) FROM ` + rs + `.failed_events WHERE source = $1 AND replayed_at IS NULL),
u AS (INSERT INTO ` + rs + `.relay_state AS t
  (source, schema_name, table_name, last_poll_time, last_published_event_id, total_events_published,
   total_events_retried, total_events_dead_lettered, pending_events, lag_seconds,
   owner, last_claim_at, events_per_second, sink_states)
  SELECT $1, $2, $3, COALESCE($9, now()), NULLIF($4, ''), $5, $6, $7, b.count, COALESCE(EXTRACT(EPOCH FROM now() - b.min), 0),
    NULLIF($8, ''), $9, $10, $11 FROM b
  ON CONFLICT (source) DO UPDATE SET last_poll_time = excluded.last_poll_time,
    owner = excluded.owner, last_claim_at = excluded.last_claim_at,
    events_per_second = excluded.events_per_second, sink_states = excluded.sink_states,
    last_published_event_id = COALESCE(excluded.last_published_event_id, t.last_published_event_id),
    total_events_published = t.total_events_published + excluded.total_events_published,
    total_events_retried = t.total_events_retried + excluded.total_events_retried,
    total_events_dead_lettered = t.total_events_dead_lettered + excluded.total_events_dead_lettered,
    pending_events = excluded.pending_events, lag_seconds = excluded.lag_seconds, updated_at = now())
SELECT b.count, b.min, d.count FROM b, d`
}
