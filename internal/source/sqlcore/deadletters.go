package sqlcore

import (
	"strings"

	"github.com/outbox-relay/outbox-relay/internal/source"
)

// DeadLetterDialect is how a database spells the dead-letter list's
// pieces.
type DeadLetterDialect interface {
	// Param is the n-th (from 1) bound parameter.
	Param(n int) string
	// In is the condition that text expr is one of vals; arg binds a
	// value and returns its parameter.
	In(expr string, vals []string, arg func(any) string) string
	// Contains is the condition that text contains sub, in any case.
	Contains(text, sub string) string
	// IDText renders a dead letter's id column as text.
	IDText(col string) string
	// Payload is a dead letter's payload as bytes: its JSON, else its raw
	// bytes.
	Payload() string
}

// ListDeadLetters is the statement that lists the dead letters f selects
// from relay's failed_events (relay quoted), oldest first (with f.Newest,
// the newest failure first), with its arguments. Its columns are
// FailedEvent's fields, in order.
func ListDeadLetters(d DeadLetterDialect, relay string, f source.DLQFilter) (string, []any) {
	var (
		where []string
		args  []any
	)
	arg := func(v any) string {
		args = append(args, v)
		return d.Param(len(args))
	}
	if len(f.IDs) > 0 {
		where = append(where, d.In(d.IDText("id"), f.IDs, arg))
	}
	if len(f.EventIDs) > 0 {
		where = append(where, d.In("original_event_id", f.EventIDs, arg))
	}
	if f.Source != "" {
		where = append(where, "source = "+arg(f.Source))
	}
	if f.EventType != "" {
		where = append(where, "event_type = "+arg(f.EventType))
	}
	if !f.Since.IsZero() {
		where = append(where, "first_failed_at >= "+arg(f.Since.UTC()))
	}
	if f.Reason != "" {
		where = append(where, d.Contains("failure_reason", arg(f.Reason)))
	}
	if !f.IncludeReplayed {
		where = append(where, "replayed_at IS NULL")
	}
	q := `SELECT ` + d.IDText("id") + `, original_event_id, source, source_schema, source_table, event_type, COALESCE(topic, ''),
  failure_reason, failure_count, first_failed_at, last_failed_at, replayed_at, replay_count,
  ` + d.Payload() + `
FROM ` + relay + `.failed_events`
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
