package postgres

import (
	"context"
	"errors"
	"fmt"
	"slices"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgconn"
	"github.com/jackc/pgx/v5/pgxpool"

	"github.com/outbox-relay/outbox-relay/internal/layout"
	"github.com/outbox-relay/outbox-relay/internal/source"
)

// Retention defaults.
const (
	DefaultPurgeBatch       = 1000
	DefaultPurgeLockTimeout = 2 * time.Second
	DefaultPurgeStmtTimeout = time.Minute
	// purgeLockRetries is how many batches in a row may give up on a lock
	// before Purge fails.
	purgeLockRetries = 5
)

// PurgeParams say which rows Purge deletes and how fast.
type PurgeParams struct {
	Source      string // the source's name, as retry_state knows it
	Table       Table
	RelaySchema string
	Layout      *layout.Layout
	// OlderThan is the age a settled row must have, by its published-at
	// column, else its created-at column.
	OlderThan time.Duration
	// IncludeDead deletes dead-lettered rows too (failed_events keeps a
	// copy of each, and a replay restores it from there).
	IncludeDead bool
	// DryRun counts what would be deleted and deletes nothing.
	DryRun bool
	// BatchSize bounds the rows one statement deletes (default
	// DefaultPurgeBatch); each batch is its own transaction.
	BatchSize int
	// Pause is slept between batches, to leave the database to others.
	Pause time.Duration
	// LockTimeout bounds how long a batch waits for a lock (default
	// DefaultPurgeLockTimeout); a batch that gives up is tried again
	// after the pause. StatementTimeout bounds one batch (default
	// DefaultPurgeStmtTimeout).
	LockTimeout, StatementTimeout time.Duration
}

// PurgeResult counts what Purge deleted, or with DryRun would delete.
type PurgeResult = source.PurgeResult

// Purge deletes the settled rows of one outbox table that are older than
// p.OlderThan, in batches that each lock at most p.BatchSize rows for one
// short transaction and skip rows another transaction holds: a delivered
// row (published flag, published-at timestamp or published status), and
// with p.IncludeDead a dead-lettered one. Pending rows, rows in backoff and
// rows claimed by a relay are never touched. It also prunes the relay's own
// tables for the source: dead letters replayed before the cutoff with their
// audit rows, and retry state of events no longer in the table.
//
// On error the result counts what was deleted before it.
func Purge(ctx context.Context, pool *pgxpool.Pool, p PurgeParams) (PurgeResult, error) {
	var res PurgeResult
	if p.OlderThan < 0 {
		return res, fmt.Errorf("purge %s: negative age %s", p.Table, p.OlderThan)
	}
	p.BatchSize = cmpOr(p.BatchSize, DefaultPurgeBatch)
	p.LockTimeout = cmpOr(p.LockTimeout, DefaultPurgeLockTimeout)
	p.StatementTimeout = cmpOr(p.StatementTimeout, DefaultPurgeStmtTimeout)
	secs := p.OlderThan.Seconds()
	r := &purger{pool: pool, p: p,
		begin: fmt.Sprintf("BEGIN; SET LOCAL lock_timeout = %d; SET LOCAL statement_timeout = %d",
			max(p.LockTimeout.Milliseconds(), 1), max(p.StatementTimeout.Milliseconds(), 1))}

	if p.Layout.Mode == "delete" {
		res.KeptByLayout = true
	} else {
		sw, err := purgeSweep(p.Layout, p.Table, p.RelaySchema, p.IncludeDead, secs)
		if err != nil {
			return res, fmt.Errorf("purge %s: %w", p.Table, err)
		}
		t, err := r.run(ctx, sw)
		res.Published, res.Dead, res.Batches = t.deleted-t.dead, t.dead, t.batches
		if err != nil {
			return res, fmt.Errorf("purge %s: %w", p.Table, err)
		}
	}
	t, err := r.run(ctx, failedEventsSweep(p.Table, p.RelaySchema, secs))
	res.FailedEvents, res.Audit = t.deleted, t.beside
	if err != nil {
		return res, fmt.Errorf("prune %s.failed_events of %s: %w", p.RelaySchema, p.Table, err)
	}
	t, err = r.run(ctx, retryStateSweep(p.Layout, p.Table, p.RelaySchema, p.Source))
	res.RetryState = t.deleted
	if err != nil {
		return res, fmt.Errorf("prune %s.retry_state of %s: %w", p.RelaySchema, p.Source, err)
	}
	return res, nil
}

func cmpOr[T int | time.Duration](v, def T) T {
	if v <= 0 {
		return def
	}
	return v
}

// purger runs sweeps in batches.
type purger struct {
	pool  *pgxpool.Pool
	p     PurgeParams
	begin string // BEGIN with the batch's lock and statement timeouts
}

// totals add up a sweep's batches. For a dry run deleted and its parts are
// what would be deleted.
type totals struct {
	deleted, dead, beside int64
	batches               int
}

// run deletes what sw selects, batch after batch, each starting after the
// key the previous one ended at, until a batch finds fewer rows than it
// may take.
func (r *purger) run(ctx context.Context, sw sweep) (totals, error) {
	var t totals
	if r.p.DryRun {
		// The second count is the dead letters among the rows, or the
		// rows deleted beside them; which one depends on the sweep.
		var n, second int64
		if err := r.pool.QueryRow(ctx, sw.count, sw.args...).Scan(&n, &second); err != nil {
			return t, fmt.Errorf("count: %w", err)
		}
		t.deleted, t.dead, t.beside = n, second, second
		return t, nil
	}
	var (
		cursor  *string
		retries int
	)
	for {
		if t.batches > 0 || retries > 0 {
			if err := sleep(ctx, r.p.Pause); err != nil {
				return t, err
			}
		}
		q, args := sw.first, append(slices.Clone(sw.args), r.p.BatchSize)
		if cursor != nil {
			q, args = sw.next, append(args, *cursor)
		}
		var (
			selected, deleted, dead, beside int64
			last                            *string
		)
		err := pgx.BeginTxFunc(ctx, r.pool, pgx.TxOptions{BeginQuery: r.begin}, func(tx pgx.Tx) error {
			return tx.QueryRow(ctx, q, args...).Scan(&selected, &deleted, &dead, &beside, &last)
		})
		if err != nil {
			if isLockTimeout(err) && retries < purgeLockRetries && ctx.Err() == nil {
				retries++
				continue
			}
			if isPrivilegeError(err) {
				return t, fmt.Errorf("batch %d: %w: %w", t.batches+1, source.ErrNoPrivilege, err)
			}
			return t, fmt.Errorf("batch %d: %w", t.batches+1, err)
		}
		retries = 0
		t.batches++
		t.deleted += deleted
		t.dead += dead
		t.beside += beside
		if selected < int64(r.p.BatchSize) || last == nil {
			return t, nil
		}
		cursor = last
	}
}

// isLockTimeout says whether a statement gave up waiting for a lock.
func isLockTimeout(err error) bool {
	pgErr, ok := errors.AsType[*pgconn.PgError](err)
	return ok && pgErr.Code == "55P03"
}

func sleep(ctx context.Context, d time.Duration) error {
	if d <= 0 {
		return ctx.Err()
	}
	tm := time.NewTimer(d)
	defer tm.Stop()
	select {
	case <-ctx.Done():
		return ctx.Err()
	case <-tm.C:
		return nil
	}
}
