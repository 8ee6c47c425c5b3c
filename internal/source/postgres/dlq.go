package postgres

import (
	"context"
	"errors"
	"fmt"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgxpool"

	"github.com/outbox-relay/outbox-relay/internal/source"
)

// FailedEvent is one row of the dead-letter table.
type FailedEvent = source.FailedEvent

// DLQFilter selects dead letters.
type DLQFilter = source.DLQFilter

// ListFailed returns dead letters matching f, oldest first (with f.Newest,
// the newest failure first).
func ListFailed(ctx context.Context, pool *pgxpool.Pool, relaySchema string, f DLQFilter) ([]FailedEvent, error) {
	q, args := listFailedSQL(relaySchema, f)
	rows, err := pool.Query(ctx, q, args...)
	if err != nil {
		return nil, fmt.Errorf("list dead letters: %w", err)
	}
	out, err := pgx.CollectRows(rows, func(r pgx.CollectableRow) (FailedEvent, error) {
		var e FailedEvent
		err := r.Scan(&e.ID, &e.OriginalEventID, &e.Source, &e.SourceSchema, &e.SourceTable, &e.EventType, &e.Topic,
			&e.Reason, &e.FailureCount, &e.FirstFailedAt, &e.LastFailedAt, &e.ReplayedAt, &e.ReplayCount, &e.Payload)
		return e, err
	})
	if err != nil {
		return nil, fmt.Errorf("list dead letters: %w", err)
	}
	return out, nil
}

// Replay puts dead letters of this store's source back into the pending set
// (see source.Replay): the row is updated back to pending (or, when the
// layout deleted it, inserted again from the copy kept in failed_events,
// which needs INSERT on the table), its retry state is cleared, the dead
// letter is marked replayed and an audit row records who did it; the relay
// is woken at commit. Each event is its own transaction.
func (s *Store) Replay(ctx context.Context, events []FailedEvent, actor string) (int, error) {
	o := s.opts
	return source.Replay(ctx, poolDriver{s.pool}, buildReplaySQL(o.Layout, o.Table, o.RelaySchema, o.Source, s.sql.pendingValues), events, actor)
}

// PurgeDead deletes the dead letters with ids that were not replayed, each
// with an audit row naming actor and the event (see source.PurgeDead); the
// rows in the application's table stay as they are. It returns how many it
// deleted.
func PurgeDead(ctx context.Context, pool *pgxpool.Pool, relaySchema string, ids []string, actor string) (int, error) {
	return source.PurgeDead(ctx, poolDriver{pool}, buildPurgeDeadSQL(relaySchema), ids, actor)
}

// poolDriver runs the dead-letter flows' transactions on a pool.
type poolDriver struct{ pool *pgxpool.Pool }

func (d poolDriver) Begin(ctx context.Context) (source.Tx, error) {
	tx, err := d.pool.Begin(ctx)
	if err != nil {
		return nil, err
	}
	return pgTx{tx}, nil
}

func (poolDriver) NoPrivilege(err error) error {
	if isPrivilegeError(err) {
		return source.ErrNoPrivilege
	}
	return nil
}

// pgTx is a pgx transaction as source.Tx.
type pgTx struct{ tx pgx.Tx }

func (t pgTx) Exec(ctx context.Context, q string, args ...any) (int64, error) {
	tag, err := t.tx.Exec(ctx, q, args...)
	return tag.RowsAffected(), err
}

func (t pgTx) QueryRow(ctx context.Context, q string, args []any, dest ...any) (bool, error) {
	err := t.tx.QueryRow(ctx, q, args...).Scan(dest...)
	if errors.Is(err, pgx.ErrNoRows) {
		return false, nil
	}
	return err == nil, err
}

func (t pgTx) Commit(ctx context.Context) error   { return t.tx.Commit(ctx) }
func (t pgTx) Rollback(ctx context.Context) error { return t.tx.Rollback(ctx) }
