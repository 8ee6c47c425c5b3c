package postgres

import (
	"strings"
	"time"

	"github.com/outbox-relay/outbox-relay/internal/layout"
	"github.com/outbox-relay/outbox-relay/internal/source"
	"github.com/outbox-relay/outbox-relay/internal/source/sqlcore"
)

// statements is the SQL of one source, built once from its layout.
type statements struct {
	claim      claimSQL
	ack        string // $1 ctids, and $2 the batch id when the layout records claims
	ackBatchID bool
	markByID   string // $1 ids, and $2 the batch id when the layout records claims: published if still pending
	dead       string // $1 ids, $2 reasons
	retryRow   string // $1 ids, $2 attempts, $3 errors; empty when the table has no retry columns
	relaySQL
	stats         string // $1 source, $2 schema, $3 table, $4 last id, $5-$7 counts
	pendingValues string // SET list that puts a row back in the pending set
}

// payloadSQL selects the payload as its bytes: JSON types as their text
// (jsonb's binary form carries a version byte), bytea raw, text as is.
func payloadSQL(l *layout.Layout, alias string) string {
	c := sq.Col(alias, l.Payload.Name)
	if l.Payload.Type == "bytea" {
		return c
	}
	return c + "::text"
}

func optCol(alias, name, cast string) string {
	if name == "" {
		return "NULL" + cast
	}
	return sq.Col(alias, name) + cast
}

// attemptsSQL is a row's failed attempts: the relay's retry state, else the
// table's own retry counter (which another relay may have kept), else 0.
func attemptsSQL(l *layout.Layout) string {
	if l.RetryCount == "" {
		return "COALESCE(r.attempts, 0)"
	}
	return "COALESCE(r.attempts, " + sq.Col("o", l.RetryCount) + "::int, 0)"
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

// rowSelect is the select list of a claimed row, in sqlcore's column
// order, then this store's own columns (see the col constants) and the
// layout's extras. attempts is the row's failed attempts; ctid, tie and
// retrying are the claim's own columns.
func rowSelect(l *layout.Layout, alias, attempts, ctid, tie, retrying string) []string {
	c := sq.Row(l, alias)
	c.ID = sq.Col(alias, l.ID.Name) + "::text"
	c.Payload = payloadSQL(l, alias)
	c.Headers = "NULL"
	if l.Headers != "" {
		c.Headers = sqlcore.NullIfEmpty(sq.Col(alias, l.Headers) + "::text")
	}
	c.CreatedAt = optCol(alias, l.CreatedAt, "::timestamptz")
	c.MaxRetries = optCol(alias, l.MaxRetries, "::int")
	c.Attempts = attempts
	return sq.List(c, l, alias, ctid, tie, retrying)
}

// RowSelect is the select list of a row of table alias for DecodeRow, for a
// store whose claims keep no physical address nor retry state (the queue):
// attempts is the row's failed attempts.
func RowSelect(l *layout.Layout, alias, attempts string) []string {
	return rowSelect(l, alias, attempts, "NULL::tid", "0::bigint", "false")
}

func buildStatements(l *layout.Layout, table, relaySchema string, ordering bool, claimTimeout time.Duration, bucket source.Bucket, prio *source.Priority) statements {
	rs := QuoteIdent(relaySchema)
	id := sq.Col("o", l.ID.Name)
	idArr := "$1::text[]::" + l.ID.Type + "[]"
	var s statements

	s.claim = claimStatements(l, table, relaySchema, ordering, claimTimeout, bucket, prio)

	// Published rows are found by their ctid: a TID scan, whatever the
	// planner thinks of the table's size (a generic plan made while the
	// table looked empty once turned id = ANY(...) into a sequential scan
	// per batch). The rows are locked by the claim, so their ctids hold.
	setPublished, setDead, setPending := sq.StateSets(l)
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
		s.markByID = "UPDATE " + table + " o SET " + setPublished + " WHERE " + id + " = ANY(" + idArr + ") AND " + sq.Pending(l, "o")
		deadSet := strings.Join(append([]string{setDead}, sq.FailureSets(l, "u.attempts", "u.reason")...), ", ")
		s.dead = "UPDATE " + table + " o SET " + deadSet +
			" FROM unnest($1::text[], $2::text[], $3::int[]) AS u(id, reason, attempts) WHERE " + id + " = u.id::" + l.ID.Type
	}
	s.pendingValues = setPending

	if sets := sq.FailureSets(l, "u.attempts", "u.err"); len(sets) > 0 {
		s.retryRow = "UPDATE " + table + " o SET " + strings.Join(sets, ", ") +
			" FROM unnest($1::text[], $2::int[], $3::text[]) AS u(id, attempts, err) WHERE " + id + " = u.id::" + l.ID.Type
	}
	s.relaySQL = newRelaySQL(l, table, rs)

	created := "NULL::timestamptz AS min"
	if l.CreatedAt != "" {
		created = "min(" + sq.Col("o", l.CreatedAt) + ")::timestamptz AS min"
	}
	backlog := "SELECT count(*), " + created + " FROM " + table + " o WHERE " + sq.Pending(l, "o")
	s.stats = StatsStatement(relaySchema, backlog)
	return s
}

// retryStateSQL records rows for another attempt: $1 source, $2 ids, $3
// order keys, $4 attempts, $5 when, $6 errors, $7 ties. rs is the relay
// schema, quoted.
func retryStateSQL(rs string) string {
	return `INSERT INTO ` + rs + `.retry_state AS t (source, event_id, order_key, attempts, next_attempt_at, last_error, tie)
SELECT $1, u.* FROM unnest($2::text[], $3::text[], $4::int[], $5::timestamptz[], $6::text[], $7::bigint[]) AS u
ON CONFLICT (source, event_id) DO UPDATE SET order_key = excluded.order_key, attempts = excluded.attempts,
  next_attempt_at = excluded.next_attempt_at, last_error = excluded.last_error, updated_at = now()`
}

// clearRetrySQL forgets the retry state of rows: $1 source, $2 ids.
func clearRetrySQL(rs string) string {
	return `DELETE FROM ` + rs + `.retry_state WHERE source = $1 AND event_id = ANY($2::text[])`
}

// insertDeadSQL records dead letters of table's rows (see
// completion.DeadLetter for its arguments). Dead letters keep the route as
// rendered and the whole row (row_data) so that a replay can restore a row
// the layout deletes.
func insertDeadSQL(l *layout.Layout, table, rs string) string {
	return `INSERT INTO ` + rs + `.failed_events (original_event_id, source, source_schema, source_table,
  event_type, topic, event_key, partition_key, headers, payload, payload_raw, row_data,
  failure_reason, failure_count, first_failed_at, last_failed_at)
SELECT u.id, $1, $2, $3, COALESCE(u.event_type, ''), u.topic, u.event_key, u.partition_key,
  CASE WHEN u.headers IS NOT NULL AND u.headers <> '' THEN u.headers::jsonb END,
  CASE WHEN u.is_json THEN convert_from(u.payload, 'UTF8')::jsonb END,
  CASE WHEN NOT u.is_json THEN u.payload END,
  to_jsonb(o), u.reason, u.attempts, COALESCE(r.first_failed_at, now()), now()
FROM unnest($4::text[], $5::text[], $6::text[], $7::text[], $8::text[], $9::text[], $10::bytea[], $11::bool[], $12::text[], $13::int[])
  AS u(id, event_type, topic, event_key, partition_key, headers, payload, is_json, reason, attempts)
JOIN ` + table + ` o ON ` + sq.Col("o", l.ID.Name) + ` = u.id::` + l.ID.Type + `
LEFT JOIN ` + rs + `.retry_state r ON r.source = $1 AND r.event_id = u.id`
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
