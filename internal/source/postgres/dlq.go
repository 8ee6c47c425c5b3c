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

// Replay puts dead letters of this store's source back into the pending set:
// the row is updated back to pending (or, when the layout deleted it,
// inserted again from the copy kept in failed_events, which needs INSERT on
// the table), its retry state is cleared, the dead letter is marked replayed
// and an audit row records who did it. Each event is its own transaction.
func (s *Store) Replay(ctx context.Context, events []FailedEvent, actor string) (int, error) {
	rq := buildReplaySQL(s.opts.Layout, s.opts.Table, s.opts.RelaySchema, s.sql.pendingValues)
	table := s.opts.Table.String()
	n := 0
	for _, e := range events {
		if e.Source != s.opts.Source {
			return n, fmt.Errorf("replay %s: dead letter belongs to source %q, not %q", e.ID, e.Source, s.opts.Source)
		}
		err := pgx.BeginFunc(ctx, s.pool, func(tx pgx.Tx) error {
			restored := false
			if rq.reset != "" {
				tag, err := tx.Exec(ctx, rq.reset, e.OriginalEventID)
				if err != nil {
					return fmt.Errorf("reset row: %w", err)
				}
				restored = tag.RowsAffected() > 0
			}
			if !restored {
				tag, err := tx.Exec(ctx, rq.restore, e.ID)
				if err != nil {
					if isPrivilegeError(err) {
						return fmt.Errorf("restore deleted row (needs INSERT on %s): %w: %w", table, source.ErrNoPrivilege, err)
					}
					return fmt.Errorf("restore deleted row: %w", err)
				}
				if tag.RowsAffected() == 0 {
					return errors.New("restore deleted row: no copy of the row was kept")
				}
			}
			if _, err := tx.Exec(ctx, rq.clearRetry, s.opts.Source, e.OriginalEventID); err != nil {
				return fmt.Errorf("clear retry state: %w", err)
			}
			if _, err := tx.Exec(ctx, rq.markReplayed, e.ID); err != nil {
				return fmt.Errorf("mark replayed: %w", err)
			}
			_, err := tx.Exec(ctx, rq.audit,
				e.ID, actor, "event "+e.OriginalEventID+" back to pending in "+table)
			if err != nil {
				return fmt.Errorf("audit: %w", err)
			}
			// Wake the relay at once, as an insert does through the
			// wake-up trigger (an update fires none); delivered at commit.
			if _, err := tx.Exec(ctx, rq.wake, s.opts.RelaySchema, s.opts.Table.Schema+"."+s.opts.Table.Name); err != nil {
				return fmt.Errorf("wake the relay: %w", err)
			}
			return nil
		})
		if err != nil {
			return n, fmt.Errorf("replay %s (event %s): %w", e.ID, e.OriginalEventID, err)
		}
		n++
	}
	return n, nil
}

// PurgeDead deletes the dead letters with ids that were not replayed, each with
// an audit row naming actor and the event; the rows in the application's
// table stay as they are. It returns how many it deleted.
func PurgeDead(ctx context.Context, pool *pgxpool.Pool, relaySchema string, ids []string, actor string) (int, error) {
	tag, err := pool.Exec(ctx, purgeDeadSQL(relaySchema), ids, actor)
	if err != nil {
		return 0, fmt.Errorf("purge dead letters: %w", err)
	}
	return int(tag.RowsAffected()), nil
}
