package postgres

import (
	"fmt"
	"strings"

	"github.com/outbox-relay/outbox-relay/internal/layout"
)

// listFailedSQL is the statement that lists the dead letters f selects,
// with its arguments.
func listFailedSQL(relaySchema string, f DLQFilter) (string, []any) {
	var (
		where []string
		args  []any
	)
	arg := func(v any) string {
		args = append(args, v)
		return fmt.Sprintf("$%d", len(args))
	}
	if len(f.IDs) > 0 {
		where = append(where, "id::text = ANY("+arg(f.IDs)+"::text[])")
	}
	if len(f.EventIDs) > 0 {
		where = append(where, "original_event_id = ANY("+arg(f.EventIDs)+"::text[])")
	}
	if f.Source != "" {
		where = append(where, "source = "+arg(f.Source))
	}
	if f.EventType != "" {
		where = append(where, "event_type = "+arg(f.EventType))
	}
	if !f.Since.IsZero() {
		where = append(where, "first_failed_at >= "+arg(f.Since))
	}
	if f.Reason != "" {
		where = append(where, "strpos(lower(failure_reason), lower("+arg(f.Reason)+")) > 0")
	}
	if !f.IncludeReplayed {
		where = append(where, "replayed_at IS NULL")
	}
	q := `SELECT id::text, original_event_id, source, source_schema, source_table, event_type, COALESCE(topic, ''),
  failure_reason, failure_count, first_failed_at, last_failed_at, replayed_at, replay_count,
  COALESCE(convert_to(payload::text, 'UTF8'), payload_raw)
FROM ` + QuoteIdent(relaySchema) + `.failed_events`
	if len(where) > 0 {
		q += " WHERE " + strings.Join(where, " AND ")
	}
	if f.Newest {
		q += " ORDER BY last_failed_at DESC, id DESC"
	} else {
		q += " ORDER BY created_at, id"
	}
	if f.Limit > 0 {
		q += " LIMIT " + arg(f.Limit)
	}
	return q, args
}

// replaySQL are the statements of one dead letter's replay.
type replaySQL struct {
	reset        string // $1 the event id; "" when there is nothing to reset
	restore      string // $1 the dead letter's id
	clearRetry   string // $1 the source, $2 the event id
	markReplayed string // $1 the dead letter's id
	audit        string // $1 the dead letter's id, $2 the actor, $3 the detail
	wake         string // $1 the channel, $2 the payload
}

func buildReplaySQL(l *layout.Layout, t Table, relaySchema, pendingValues string) replaySQL {
	rs := QuoteIdent(relaySchema)
	table := t.String()
	var s replaySQL
	if pendingValues != "" && l.Mode != "delete" {
		s.reset = "UPDATE " + table + " o SET " + pendingValues + " WHERE " + sq.Col("o", l.ID.Name) + " = $1::text::" + l.ID.Type
	}
	s.restore = "INSERT INTO " + table + " SELECT * FROM jsonb_populate_record(NULL::" + table + ", (SELECT row_data FROM " + rs + ".failed_events WHERE id = $1::uuid))"
	s.clearRetry = "DELETE FROM " + rs + ".retry_state WHERE source = $1 AND event_id = $2"
	s.markReplayed = "UPDATE " + rs + ".failed_events SET replayed_at = now(), replay_count = replay_count + 1 WHERE id = $1::uuid"
	s.audit = "INSERT INTO " + rs + ".failed_event_audit (failed_event_id, action, actor, detail) VALUES ($1::uuid, 'replay', $2, $3)"
	s.wake = "SELECT pg_notify($1, $2)"
	return s
}

// purgeDeadSQL deletes the dead letters $1 not replayed, each with an
// audit row naming the actor $2.
func purgeDeadSQL(relaySchema string) string {
	rs := QuoteIdent(relaySchema)
	return `WITH d AS (DELETE FROM ` + rs + `.failed_events WHERE id::text = ANY($1::text[]) AND replayed_at IS NULL
  RETURNING id, source, original_event_id)
INSERT INTO ` + rs + `.failed_event_audit (failed_event_id, action, actor, detail)
SELECT id, 'purge', $2, 'event ' || original_event_id || ' of source ' || source || ' deleted from the dead letters' FROM d`
}
