package mysql

import (
	"context"
	"database/sql"
	"errors"
	"fmt"
	"strings"

	gomysql "github.com/go-sql-driver/mysql"

	"github.com/outbox-relay/outbox-relay/internal/source"
)

// FailedEvent is one row of the dead-letter table.
type FailedEvent = source.FailedEvent

// DLQFilter selects dead letters.
type DLQFilter = source.DLQFilter

// ListFailed returns dead letters matching f, oldest first (with f.Newest,
// the newest failure first).
func ListFailed(ctx context.Context, db *sql.DB, relayDB string, f DLQFilter) ([]FailedEvent, error) {
	if relayDB == "" {
		relayDB = DefaultRelayDatabase
	}
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
	rows, err := db.QueryContext(ctx, q, args...)
	if err != nil {
		return nil, fmt.Errorf("list dead letters: %w", err)
	}
	defer rows.Close()
	var out []FailedEvent
	for rows.Next() {
		var (
			e        FailedEvent
			replayed sql.NullTime
		)
		if err := rows.Scan(&e.ID, &e.OriginalEventID, &e.Source, &e.SourceSchema, &e.SourceTable, &e.EventType, &e.Topic,
			&e.Reason, &e.FailureCount, &e.FirstFailedAt, &e.LastFailedAt, &replayed, &e.ReplayCount, &e.Payload); err != nil {
			return nil, fmt.Errorf("list dead letters: %w", err)
		}
		if replayed.Valid {
			t := replayed.Time
			e.ReplayedAt = &t
		}
		out = append(out, e)
	}
	if err := rows.Err(); err != nil {
		return nil, fmt.Errorf("list dead letters: %w", err)
	}
	return out, nil
}

// Replay puts dead letters of this store's source back into the pending
// set: the row is updated back to pending (or, when the layout deleted it,
// inserted again from the copy kept in failed_events, which needs INSERT on
// the table), its retry state is cleared, the dead letter is marked replayed
// and an audit row records who did it. Each event is its own transaction.
func (s *Store) Replay(ctx context.Context, events []FailedEvent, actor string) (int, error) {
	if s.invalid != nil {
		return 0, s.invalid
	}
	l := s.opts.Layout
	sets := s.sql.pendingValues
	if reset, err := s.errorReset(ctx); err != nil {
		return 0, fmt.Errorf("replay: %w", err)
	} else if reset != "" {
		sets = strings.TrimPrefix(sets+", "+reset, ", ")
	}
	update := ""
	if sets != "" && l.Mode != "delete" {
		update = "UPDATE " + s.opts.Table.String() + " SET " + sets + " WHERE " + QuoteIdent(l.ID.Name) + " = " + idValueSQL(l, "?")
	}
	n := 0
	for _, e := range events {
		if e.Source != s.opts.Source {
			return n, fmt.Errorf("replay %s: dead letter belongs to source %q, not %q", e.ID, e.Source, s.opts.Source)
		}
		if err := s.replayOne(ctx, e, update, actor); err != nil {
			return n, fmt.Errorf("replay %s (event %s): %w", e.ID, e.OriginalEventID, err)
		}
		n++
	}
	return n, nil
}

func (s *Store) replayOne(ctx context.Context, e FailedEvent, update, actor string) error {
	rs := QuoteIdent(s.opts.RelayDatabase)
	table := s.opts.Table.String()
	tx, err := s.db.BeginTx(ctx, nil)
	if err != nil {
		return err
	}
	defer func() { _ = tx.Rollback() }()
	restored := false
	if update != "" {
		if _, err := tx.ExecContext(ctx, update, e.OriginalEventID); err != nil {
			return fmt.Errorf("reset row: %w", err)
		}
		// Rows matched, not changed, is what counts: a row already pending
		// is there all the same.
		var there int
		if err := tx.QueryRowContext(ctx, "SELECT COUNT(*) FROM "+table+" WHERE "+QuoteIdent(s.opts.Layout.ID.Name)+" = "+
			idValueSQL(s.opts.Layout, "?"), e.OriginalEventID).Scan(&there); err != nil {
			return fmt.Errorf("reset row: %w", err)
		}
		restored = there > 0
	}
	if !restored {
		cols, err := s.tableColumns(ctx)
		if err != nil {
			return err
		}
		var names, vals []string
		for _, c := range cols {
			if c.Generated {
				continue
			}
			names = append(names, QuoteIdent(c.Name))
			vals = append(vals, restoreSQL(c, "f.row_data"))
		}
		res, err := tx.ExecContext(ctx, "INSERT INTO "+table+" ("+strings.Join(names, ", ")+") SELECT "+strings.Join(vals, ", ")+
			" FROM "+rs+".failed_events f WHERE f.id = ? AND f.row_data IS NOT NULL", e.ID)
		if err != nil {
			if isPrivilegeError(err) {
				return fmt.Errorf("restore deleted row (needs INSERT on %s): %w: %w", table, source.ErrNoPrivilege, err)
			}
			return fmt.Errorf("restore deleted row: %w", err)
		}
		if n, _ := res.RowsAffected(); n == 0 {
			return errors.New("restore deleted row: no copy of the row was kept")
		}
	}
	if _, err := tx.ExecContext(ctx, "DELETE FROM "+rs+".retry_state WHERE source = ? AND event_id = ?", s.opts.Source, e.OriginalEventID); err != nil {
		return fmt.Errorf("clear retry state: %w", err)
	}
	if _, err := tx.ExecContext(ctx, "UPDATE "+rs+".failed_events SET replayed_at = "+now+", replay_count = replay_count + 1 WHERE id = ?", e.ID); err != nil {
		return fmt.Errorf("mark replayed: %w", err)
	}
	if _, err := tx.ExecContext(ctx, "INSERT INTO "+rs+".failed_event_audit (failed_event_id, action, actor, detail, at) VALUES (?, 'replay', ?, ?, "+now+")",
		e.ID, actor, "event "+e.OriginalEventID+" back to pending in "+table); err != nil {
		return fmt.Errorf("audit: %w", err)
	}
	if err := tx.Commit(); err != nil {
		return fmt.Errorf("commit: %w", err)
	}
	return nil
}

// isPrivilegeError says whether err is the server refusing for lack of a
// grant (table, column or database access denied).
func isPrivilegeError(err error) bool {
	var me *gomysql.MySQLError
	if !errors.As(err, &me) {
		return false
	}
	switch me.Number {
	case 1142, 1143, 1044, 1227:
		return true
	}
	return false
}

// PurgeDead deletes the dead letters with ids that were not replayed, each with
// an audit row naming actor and the event; the rows in the application's
// table stay as they are. It returns how many it deleted.
func PurgeDead(ctx context.Context, db *sql.DB, relayDB string, ids []string, actor string) (int, error) {
	if relayDB == "" {
		relayDB = DefaultRelayDatabase
	}
	rs := QuoteIdent(relayDB)
	tx, err := db.BeginTx(ctx, nil)
	if err != nil {
		return 0, fmt.Errorf("purge dead letters: %w", err)
	}
	defer func() { _ = tx.Rollback() }()
	n := 0
	for _, id := range ids {
		var event, src string
		err := tx.QueryRowContext(ctx, "SELECT original_event_id, source FROM "+rs+".failed_events WHERE CAST(id AS CHAR) = ? AND replayed_at IS NULL FOR UPDATE", id).Scan(&event, &src)
		if errors.Is(err, sql.ErrNoRows) {
			continue
		}
		if err != nil {
			return 0, fmt.Errorf("purge dead letters: %w", err)
		}
		if _, err := tx.ExecContext(ctx, "DELETE FROM "+rs+".failed_events WHERE id = ?", id); err != nil {
			return 0, fmt.Errorf("purge dead letters: %w", err)
		}
		if _, err := tx.ExecContext(ctx, "INSERT INTO "+rs+".failed_event_audit (failed_event_id, action, actor, detail, at) VALUES (?, 'purge', ?, ?, "+now+")",
			id, actor, "event "+event+" of source "+src+" deleted from the dead letters"); err != nil {
			return 0, fmt.Errorf("purge dead letters: audit: %w", err)
		}
		n++
	}
	if err := tx.Commit(); err != nil {
		return 0, fmt.Errorf("purge dead letters: %w", err)
	}
	return n, nil
}
