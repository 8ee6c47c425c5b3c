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
	q, args := listFailedSQL(relayDB, f)
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
	rq := buildReplaySQL(l, s.opts.Table, s.opts.RelayDatabase, sets)
	n := 0
	for _, e := range events {
		if e.Source != s.opts.Source {
			return n, fmt.Errorf("replay %s: dead letter belongs to source %q, not %q", e.ID, e.Source, s.opts.Source)
		}
		if err := s.replayOne(ctx, e, rq, actor); err != nil {
			return n, fmt.Errorf("replay %s (event %s): %w", e.ID, e.OriginalEventID, err)
		}
		n++
	}
	return n, nil
}

func (s *Store) replayOne(ctx context.Context, e FailedEvent, rq replaySQL, actor string) error {
	table := s.opts.Table.String()
	tx, err := s.db.BeginTx(ctx, nil)
	if err != nil {
		return err
	}
	defer func() { _ = tx.Rollback() }()
	restored := false
	if rq.reset != "" {
		if _, err := tx.ExecContext(ctx, rq.reset, e.OriginalEventID); err != nil {
			return fmt.Errorf("reset row: %w", err)
		}
		// Rows matched, not changed, is what counts: a row already pending
		// is there all the same.
		var there int
		if err := tx.QueryRowContext(ctx, rq.present, e.OriginalEventID).Scan(&there); err != nil {
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
		res, err := tx.ExecContext(ctx, fmt.Sprintf(rq.restore, strings.Join(names, ", "), strings.Join(vals, ", ")), e.ID)
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
	if _, err := tx.ExecContext(ctx, rq.clearRetry, s.opts.Source, e.OriginalEventID); err != nil {
		return fmt.Errorf("clear retry state: %w", err)
	}
	if _, err := tx.ExecContext(ctx, rq.markReplayed, e.ID); err != nil {
		return fmt.Errorf("mark replayed: %w", err)
	}
	if _, err := tx.ExecContext(ctx, rq.audit,
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
	pq := buildPurgeDeadSQL(relayDB)
	tx, err := db.BeginTx(ctx, nil)
	if err != nil {
		return 0, fmt.Errorf("purge dead letters: %w", err)
	}
	defer func() { _ = tx.Rollback() }()
	n := 0
	for _, id := range ids {
		var event, src string
		err := tx.QueryRowContext(ctx, pq.lock, id).Scan(&event, &src)
		if errors.Is(err, sql.ErrNoRows) {
			continue
		}
		if err != nil {
			return 0, fmt.Errorf("purge dead letters: %w", err)
		}
		if _, err := tx.ExecContext(ctx, pq.del, id); err != nil {
			return 0, fmt.Errorf("purge dead letters: %w", err)
		}
		if _, err := tx.ExecContext(ctx, pq.audit,
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
