package mysql

import (
	"strings"

	"github.com/outbox-relay/outbox-relay/internal/layout"
)

// listFailedSQL is the statement that lists the dead letters f selects,
// with its arguments.
func listFailedSQL(relayDB string, f DLQFilter) (string, []any) {
	var (
		where []string
		args  []any
	)
	in := func(col string, vals []string) {
		where = append(where, col+" IN ("+placeholders(len(vals), "")+")")
		for _, v := range vals {
			args = append(args, v)
		}
	}
	if len(f.IDs) > 0 {
		in("CAST(id AS CHAR)", f.IDs)
	}
	if len(f.EventIDs) > 0 {
		in("original_event_id", f.EventIDs)
	}
	if f.Source != "" {
		where, args = append(where, "source = ?"), append(args, f.Source)
	}
	if f.EventType != "" {
		where, args = append(where, "event_type = ?"), append(args, f.EventType)
	}
	if !f.Since.IsZero() {
		where, args = append(where, "first_failed_at >= ?"), append(args, f.Since.UTC())
	}
	if f.Reason != "" {
		where, args = append(where, "LOCATE(LOWER(?), LOWER(failure_reason)) > 0"), append(args, f.Reason)
	}
	if !f.IncludeReplayed {
		where = append(where, "replayed_at IS NULL")
	}
	q := `SELECT CAST(id AS CHAR), original_event_id, source, source_schema, source_table, event_type, COALESCE(topic, ''),
  failure_reason, failure_count, first_failed_at, last_failed_at, replayed_at, replay_count,
  COALESCE(CAST(payload AS CHAR CHARACTER SET utf8mb4), payload_raw)
FROM ` + QuoteIdent(relayDB) + `.failed_events`
	if len(where) > 0 {
		q += " WHERE " + strings.Join(where, " AND ")
	}
	if f.Newest {
		q += " ORDER BY last_failed_at DESC, id DESC"
	} else {
		q += " ORDER BY created_at, id"
	}
	if f.Limit > 0 {
		q += " LIMIT ?"
		args = append(args, f.Limit)
	}
	return q, args
}

// replaySQL are the statements of one dead letter's replay.
type replaySQL struct {
	// reset takes the event id; "" when there is nothing to reset. Its
	// SET list gets the error column's reset (see errorReset) when the
	// layout has one.
	reset   string
	present string // counts the rows with the event id
	// restore takes the dead letter's id; its %s are the column names
	// and their values (see restoreSQL).
	restore      string
	clearRetry   string // the source, the event id
	markReplayed string // the dead letter's id
	audit        string // the dead letter's id, the actor, the detail
}

func buildReplaySQL(l *layout.Layout, t Table, relayDB, sets string) replaySQL {
	rs := QuoteIdent(relayDB)
	table := t.String()
	var s replaySQL
	if sets != "" && l.Mode != "delete" {
		s.reset = "UPDATE " + table + " SET " + sets + " WHERE " + QuoteIdent(l.ID.Name) + " = " + idValueSQL(l, "?")
	}
	s.present = "SELECT COUNT(*) FROM " + table + " WHERE " + QuoteIdent(l.ID.Name) + " = " + idValueSQL(l, "?")
	s.restore = "INSERT INTO " + table + " (%s) SELECT %s FROM " + rs + ".failed_events f WHERE f.id = ? AND f.row_data IS NOT NULL"
	s.clearRetry = "DELETE FROM " + rs + ".retry_state WHERE source = ? AND event_id = ?"
	s.markReplayed = "UPDATE " + rs + ".failed_events SET replayed_at = " + now + ", replay_count = replay_count + 1 WHERE id = ?"
	s.audit = "INSERT INTO " + rs + ".failed_event_audit (failed_event_id, action, actor, detail, at) VALUES (?, 'replay', ?, ?, " + now + ")"
	return s
}

// purgeDeadSQL are the statements that delete one dead letter not
// replayed: lock it (and read its event and source), delete it, audit it.
type purgeDeadSQL struct{ lock, del, audit string }

func buildPurgeDeadSQL(relayDB string) purgeDeadSQL {
	rs := QuoteIdent(relayDB)
	return purgeDeadSQL{
		lock:  "SELECT original_event_id, source FROM " + rs + ".failed_events WHERE CAST(id AS CHAR) = ? AND replayed_at IS NULL FOR UPDATE",
		del:   "DELETE FROM " + rs + ".failed_events WHERE id = ?",
		audit: "INSERT INTO " + rs + ".failed_event_audit (failed_event_id, action, actor, detail, at) VALUES (?, 'purge', ?, ?, " + now + ")",
	}
}
