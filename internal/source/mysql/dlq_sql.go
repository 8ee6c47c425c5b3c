package mysql

import (
	"context"
	"strings"

	"github.com/outbox-relay/outbox-relay/internal/layout"
	"github.com/outbox-relay/outbox-relay/internal/source"
	"github.com/outbox-relay/outbox-relay/internal/source/sqlcore"
)

// MySQL's spelling of the dead-letter list (sqlcore.DeadLetterDialect).

func (dialect) Param(int) string { return "?" }

// In binds each value on its own.
func (dialect) In(expr string, vals []string, arg func(any) string) string {
	ps := make([]string, len(vals))
	for i, v := range vals {
		ps[i] = arg(v)
	}
	return expr + " IN (" + strings.Join(ps, ", ") + ")"
}

func (dialect) Contains(text, sub string) string {
	return "LOCATE(LOWER(" + sub + "), LOWER(" + text + ")) > 0"
}

func (dialect) IDText(col string) string { return "CAST(" + col + " AS CHAR)" }
func (dialect) Payload() string {
	return "COALESCE(CAST(payload AS CHAR CHARACTER SET utf8mb4), payload_raw)"
}

// listFailedSQL is the statement that lists the dead letters f selects,
// with its arguments.
func listFailedSQL(relayDB string, f DLQFilter) (string, []any) {
	return sqlcore.ListDeadLetters(dialect{}, QuoteIdent(relayDB), f)
}

// buildReplaySQL returns the statements of a dead letter's replay into
// table t of layout l. sets is the SET list of a row put back in the
// pending set, the error column's reset included (see errorReset);
// columns returns the table's columns, which the restore of a deleted row
// names one by one.
func buildReplaySQL(l *layout.Layout, t Table, relayDB, src, sets string, columns func(context.Context) ([]tableColumn, error)) source.ReplayStatements {
	rs := QuoteIdent(relayDB)
	table := t.String()
	s := source.ReplayStatements{Source: src, Table: table}
	if sets != "" && l.Mode != "delete" {
		s.Reset = "UPDATE " + table + " SET " + sets + " WHERE " + QuoteIdent(l.ID.Name) + " = " + idValueSQL(l, "?")
	}
	// Rows matched, not changed, is what counts: a row already pending is
	// there all the same.
	s.Present = "SELECT COUNT(*) FROM " + table + " WHERE " + QuoteIdent(l.ID.Name) + " = " + idValueSQL(l, "?")
	s.Restore = func(ctx context.Context) (string, error) {
		cols, err := columns(ctx)
		if err != nil {
			return "", err
		}
		var names, vals []string
		for _, c := range cols {
			if c.Generated {
				continue
			}
			names = append(names, QuoteIdent(c.Name))
			vals = append(vals, restoreSQL(c, "f.row_data"))
		}
		return "INSERT INTO " + table + " (" + strings.Join(names, ", ") + ") SELECT " + strings.Join(vals, ", ") +
			" FROM " + rs + ".failed_events f WHERE f.id = ? AND f.row_data IS NOT NULL", nil
	}
	s.ClearRetry = "DELETE FROM " + rs + ".retry_state WHERE source = ? AND event_id = ?"
	s.MarkReplayed = "UPDATE " + rs + ".failed_events SET replayed_at = " + now + ", replay_count = replay_count + 1 WHERE id = ?"
	s.Audit = "INSERT INTO " + rs + ".failed_event_audit (failed_event_id, action, actor, detail, at) VALUES (?, 'replay', ?, ?, " + now + ")"
	return s
}

// buildPurgeDeadSQL returns the statements that delete one dead letter
// not replayed.
func buildPurgeDeadSQL(relayDB string) source.PurgeDeadStatements {
	rs := QuoteIdent(relayDB)
	return source.PurgeDeadStatements{
		Lock:   "SELECT original_event_id, source FROM " + rs + ".failed_events WHERE CAST(id AS CHAR) = ? AND replayed_at IS NULL FOR UPDATE",
		Delete: "DELETE FROM " + rs + ".failed_events WHERE id = ?",
		Audit:  "INSERT INTO " + rs + ".failed_event_audit (failed_event_id, action, actor, detail, at) VALUES (?, 'purge', ?, ?, " + now + ")",
	}
}
