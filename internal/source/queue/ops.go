package queue

import (
	"context"
	"errors"
	"fmt"
	"time"

	"github.com/jackc/pgx/v5"

	"github.com/outbox-relay/outbox-relay/internal/source"
	"github.com/outbox-relay/outbox-relay/internal/source/postgres"
)

// RecordStats implements source.Store: every row of the hot table is
// pending.
func (s *Store) RecordStats(ctx context.Context, st source.Stats) (source.Gauges, error) {
	return postgres.RecordStats(ctx, s.pool, s.sql.stats, s.opts.Source, s.opts.Table, st)
}

// Zombie is a dispatch the reaper put back.
type Zombie struct {
	ID, Participant string
	Sequence        int64
}

// Reap puts back the rows whose attempt has been DISPATCHING for longer
// than timeout with no outcome (the dispatcher died), same id and
// sequence, due now, and records a zombie outcome for each. It is safe to
// run concurrently and again: an attempt gets one outcome, and a row is
// put back only by the reaper that recorded it.
func (s *Store) Reap(ctx context.Context, timeout time.Duration) ([]Zombie, error) {
	rows, err := s.pool.Query(ctx, s.sql.reap, timeout.Seconds())
	if err != nil {
		return nil, fmt.Errorf("reap zombie dispatches of %s: %w", s.opts.Table, err)
	}
	out, err := pgx.CollectRows(rows, func(r pgx.CollectableRow) (Zombie, error) {
		var z Zombie
		err := r.Scan(&z.ID, &z.Participant, &z.Sequence)
		return z, err
	})
	if err != nil {
		return nil, fmt.Errorf("reap zombie dispatches of %s: %w", s.opts.Table, err)
	}
	if m := s.opts.Metrics; m != nil && len(out) > 0 {
		m.Attempts(s.opts.Layout.Queue.Archive.States.Zombie).Add(float64(len(out)))
		m.ReaperRequeues.Add(float64(len(out)))
	}
	return out, nil
}

// Gauges describe a queue now: its depth and the age of its oldest due row,
// and the dispatches left without an outcome for longer than stuckAfter.
type Gauges struct {
	Pending, StuckDispatching int64
	OldestPendingAge          time.Duration
}

// Gauges reads the queue's gauges in one statement.
func (s *Store) Gauges(ctx context.Context, stuckAfter time.Duration) (Gauges, error) {
	var g Gauges
	var oldest float64
	err := s.pool.QueryRow(ctx, s.sql.gauges, stuckAfter.Seconds()).Scan(&g.Pending, &oldest, &g.StuckDispatching)
	if err != nil {
		return g, fmt.Errorf("gauges of %s: %w", s.opts.Table, err)
	}
	g.OldestPendingAge = time.Duration(oldest * float64(time.Second))
	return g, nil
}

// Gap is a participant held by a hole in its sequence: its earliest waiting
// row is Next, but its last settled sequence number is Last, so
// Last+1 .. Next-1 are missing.
type Gap struct {
	Participant string
	Next, Last  int64
}

// Gaps lists the participants a gap holds.
func (s *Store) Gaps(ctx context.Context) ([]Gap, error) {
	rows, err := s.pool.Query(ctx, s.sql.gaps)
	if err != nil {
		return nil, fmt.Errorf("sequence gaps of %s: %w", s.opts.Table, err)
	}
	out, err := pgx.CollectRows(rows, func(r pgx.CollectableRow) (Gap, error) {
		var g Gap
		err := r.Scan(&g.Participant, &g.Next, &g.Last)
		return g, err
	})
	if err != nil {
		return nil, fmt.Errorf("sequence gaps of %s: %w", s.opts.Table, err)
	}
	return out, nil
}

// ErrNotReplayable says a dead letter's row cannot be put back: it is
// pending already, or its FAILED attempt is not in the archive.
var ErrNotReplayable = errors.New("no FAILED attempt to put back, or the row is pending already")

// Replay puts dead letters back in the hot table from their FAILED attempt
// (same id and sequence, due now: a replay goes before the participant's
// later rows), marks them replayed and audits it under actor, each in one
// transaction. The table's trigger wakes the relay.
func (s *Store) Replay(ctx context.Context, events []source.FailedEvent, actor string) (int, error) {
	rs := postgres.QuoteIdent(s.opts.RelaySchema)
	n := 0
	for _, e := range events {
		if e.Source != s.opts.Source {
			return n, fmt.Errorf("replay %s: dead letter belongs to source %q, not %q", e.ID, e.Source, s.opts.Source)
		}
		err := pgx.BeginFunc(ctx, s.pool, func(tx pgx.Tx) error {
			tag, err := tx.Exec(ctx, s.sql.replay, e.OriginalEventID)
			if err != nil {
				return fmt.Errorf("put back: %w", err)
			}
			if tag.RowsAffected() == 0 {
				return ErrNotReplayable
			}
			if _, err := tx.Exec(ctx, "UPDATE "+rs+".failed_events SET replayed_at = now(), replay_count = replay_count + 1 WHERE id = $1::uuid", e.ID); err != nil {
				return fmt.Errorf("mark replayed: %w", err)
			}
			_, err = tx.Exec(ctx, "INSERT INTO "+rs+".failed_event_audit (failed_event_id, action, actor, detail) VALUES ($1::uuid, 'replay', $2, $3)",
				e.ID, actor, "event "+e.OriginalEventID+" back to pending in "+s.opts.Table.String())
			if err != nil {
				return fmt.Errorf("audit: %w", err)
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
