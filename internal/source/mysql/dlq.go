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
// set (see source.Replay): the row is updated back to pending, its error
// column emptied as its type allows (or, when the layout deleted it,
// inserted again from the copy kept in failed_events, which needs INSERT on
// the table), its retry state is cleared, the dead letter is marked
// replayed and an audit row records who did it. Each event is its own
// transaction.
func (s *Store) Replay(ctx context.Context, events []FailedEvent, actor string) (int, error) {
	if s.invalid != nil {
		return 0, s.invalid
	}
	sets := s.sql.pendingValues
	if reset, err := s.errorReset(ctx); err != nil {
		return 0, fmt.Errorf("replay: %w", err)
	} else if reset != "" {
		sets = strings.TrimPrefix(sets+", "+reset, ", ")
	}
	o := s.opts
	return source.Replay(ctx, dbDriver{s.db}, buildReplaySQL(o.Layout, o.Table, o.RelayDatabase, o.Source, sets, s.tableColumns), events, actor)
}

// PurgeDead deletes the dead letters with ids that were not replayed, each
// with an audit row naming actor and the event (see source.PurgeDead); the
// rows in the application's table stay as they are. It returns how many it
// deleted.
func PurgeDead(ctx context.Context, db *sql.DB, relayDB string, ids []string, actor string) (int, error) {
	if relayDB == "" {
		relayDB = DefaultRelayDatabase
	}
	return source.PurgeDead(ctx, dbDriver{db}, buildPurgeDeadSQL(relayDB), ids, actor)
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

// dbDriver runs the dead-letter flows' transactions on a database.
type dbDriver struct{ db *sql.DB }

func (d dbDriver) Begin(ctx context.Context) (source.Tx, error) {
	tx, err := d.db.BeginTx(ctx, nil)
	if err != nil {
		return nil, err
	}
	return sqlTx{tx}, nil
}

func (dbDriver) NoPrivilege(err error) error {
	if isPrivilegeError(err) {
		return source.ErrNoPrivilege
	}
	return nil
}

// sqlTx is a database/sql transaction as source.Tx.
type sqlTx struct{ tx *sql.Tx }

func (t sqlTx) Exec(ctx context.Context, q string, args ...any) (int64, error) {
	res, err := t.tx.ExecContext(ctx, q, args...)
	if err != nil {
		return 0, err
	}
	return res.RowsAffected()
}

func (t sqlTx) QueryRow(ctx context.Context, q string, args []any, dest ...any) (bool, error) {
	err := t.tx.QueryRowContext(ctx, q, args...).Scan(dest...)
	if errors.Is(err, sql.ErrNoRows) {
		return false, nil
	}
	return err == nil, err
}

func (t sqlTx) Commit(context.Context) error   { return t.tx.Commit() }
func (t sqlTx) Rollback(context.Context) error { return t.tx.Rollback() }
