package postgres

import (
	"context"
	"fmt"

	"github.com/outbox-relay/outbox-relay/internal/layout"
	"github.com/outbox-relay/outbox-relay/internal/source"
	"github.com/outbox-relay/outbox-relay/internal/source/sqlcore"
)

// PostgreSQL's spelling of the dead-letter list (sqlcore.DeadLetterDialect).

func (dialect) Param(n int) string { return fmt.Sprintf("$%d", n) }

// In binds the values as one text array.
func (dialect) In(expr string, vals []string, arg func(any) string) string {
	return expr + " = ANY(" + arg(vals) + "::text[])"
}

func (dialect) Contains(text, sub string) string {
	return "strpos(lower(" + text + "), lower(" + sub + ")) > 0"
}

func (dialect) IDText(col string) string { return col + "::text" }
func (dialect) Payload() string          { return "COALESCE(convert_to(payload::text, 'UTF8'), payload_raw)" }

// listFailedSQL is the statement that lists the dead letters f selects,
// with its arguments.
func listFailedSQL(relaySchema string, f DLQFilter) (string, []any) {
	return sqlcore.ListDeadLetters(dialect{}, QuoteIdent(relaySchema), f)
}

// buildReplaySQL returns the statements of a dead letter's replay into
// table t of layout l.
func buildReplaySQL(l *layout.Layout, t Table, relaySchema, src, pendingValues string) source.ReplayStatements {
	rs := QuoteIdent(relaySchema)
	table := t.String()
	s := source.ReplayStatements{Source: src, Table: table}
	if pendingValues != "" && l.Mode != "delete" {
		s.Reset = "UPDATE " + table + " o SET " + pendingValues + " WHERE " + sq.Col("o", l.ID.Name) + " = $1::text::" + l.ID.Type
	}
	restore := "INSERT INTO " + table + " SELECT * FROM jsonb_populate_record(NULL::" + table + ", (SELECT row_data FROM " + rs + ".failed_events WHERE id = $1::uuid))"
	s.Restore = func(context.Context) (string, error) { return restore, nil }
	s.ClearRetry = "DELETE FROM " + rs + ".retry_state WHERE source = $1 AND event_id = $2"
	s.MarkReplayed = "UPDATE " + rs + ".failed_events SET replayed_at = now(), replay_count = replay_count + 1 WHERE id = $1::uuid"
	s.Audit = "INSERT INTO " + rs + ".failed_event_audit (failed_event_id, action, actor, detail) VALUES ($1::uuid, 'replay', $2, $3)"
	// Wake the relay at once, as an insert does through the wake-up
	// trigger (an update fires none); delivered at commit.
	s.Wake, s.WakeArgs = "SELECT pg_notify($1, $2)", []any{relaySchema, t.Schema + "." + t.Name}
	return s
}

// buildPurgeDeadSQL returns the statements that delete one dead letter
// not replayed.
func buildPurgeDeadSQL(relaySchema string) source.PurgeDeadStatements {
	rs := QuoteIdent(relaySchema)
	return source.PurgeDeadStatements{
		Lock:   "SELECT original_event_id, source FROM " + rs + ".failed_events WHERE id::text = $1 AND replayed_at IS NULL FOR UPDATE",
		Delete: "DELETE FROM " + rs + ".failed_events WHERE id = $1::uuid",
		Audit:  "INSERT INTO " + rs + ".failed_event_audit (failed_event_id, action, actor, detail) VALUES ($1::uuid, 'purge', $2, $3)",
	}
}
