package postgres

import (
	"context"
	"errors"
	"fmt"
	"slices"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgconn"
	"github.com/jackc/pgx/v5/pgxpool"

	"github.com/outbox-relay/outbox-relay/internal/layout"
	"github.com/outbox-relay/outbox-relay/internal/source"
)

// PurgeParams say which table Purge cleans, for which source, and how
// (source.PurgeOptions: the age, dead letters, batches, pauses, timeouts).
type PurgeParams struct {
	Source      string // the source's name, as retry_state knows it
	Table       Table
	RelaySchema string
	Layout      *layout.Layout
	source.PurgeOptions
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
// audit rows, and retry state of events no longer in the table. The run
// itself is source.Purge's; this package supplies its statements.
//
// On error the result counts what was deleted before it.
func Purge(ctx context.Context, pool *pgxpool.Pool, p PurgeParams) (PurgeResult, error) {
	lock, stmt := source.PurgeTimeouts(p.LockTimeout, p.StatementTimeout)
	d := &purgeDriver{pool: pool, p: p, secs: p.OlderThan.Seconds(),
		begin: fmt.Sprintf("BEGIN; SET LOCAL lock_timeout = %d; SET LOCAL statement_timeout = %d",
			max(lock.Milliseconds(), 1), max(stmt.Milliseconds(), 1))}
	return source.Purge(ctx, d, source.PurgeRun{
		Table: p.Table.String(), Relay: p.RelaySchema, Source: p.Source, KeptRows: p.Layout.Mode == "delete" || p.Layout.Mode == layout.ModeNone,
		PurgeOptions: p.PurgeOptions,
	})
}

// purgeDriver runs a retention run's batches on PostgreSQL: one statement
// a batch, which selects, locks and deletes.
type purgeDriver struct {
	pool  *pgxpool.Pool
	p     PurgeParams
	secs  float64 // the age, in seconds
	begin string  // BEGIN with the batch's lock and statement timeouts
}

func (d *purgeDriver) OutboxSweep(_ context.Context, includeDead bool) (sweep, error) {
	return purgeSweep(d.p.Layout, d.p.Table, d.p.RelaySchema, includeDead, d.secs)
}

func (d *purgeDriver) DeadLetterSweep() sweep {
	return failedEventsSweep(d.p.Table, d.p.RelaySchema, d.secs)
}

func (d *purgeDriver) RetryStateSweep() sweep {
	return retryStateSweep(d.p.Layout, d.p.Table, d.p.RelaySchema, d.p.Source)
}

// CountSweep counts a dry run's sweep in one statement.
func (d *purgeDriver) CountSweep(ctx context.Context, sw sweep) (n, second int64, err error) {
	err = d.pool.QueryRow(ctx, sw.count, sw.args...).Scan(&n, &second)
	return n, second, err
}

// PurgeBatch runs one batch: one statement that selects, locks and
// deletes. A dry run is counted by CountSweep, never here.
func (d *purgeDriver) PurgeBatch(ctx context.Context, sw sweep, cursor *string, limit int, dryRun bool) (source.PurgeBatch, error) {
	var b source.PurgeBatch
	if dryRun {
		return b, errors.New("a dry run is counted in one statement (CountSweep), not by batches")
	}
	q, args := sw.first, append(slices.Clone(sw.args), limit)
	if cursor != nil {
		q, args = sw.next, append(args, *cursor)
	}
	var (
		selected int64
		last     *string
	)
	err := pgx.BeginTxFunc(ctx, d.pool, pgx.TxOptions{BeginQuery: d.begin}, func(tx pgx.Tx) error {
		return tx.QueryRow(ctx, q, args...).Scan(&selected, &b.Deleted, &b.Dead, &b.Beside, &last)
	})
	if err != nil {
		if isPrivilegeError(err) {
			return b, fmt.Errorf("%w: %w", source.ErrNoPrivilege, err)
		}
		return b, err
	}
	b.Found = int(selected)
	if last != nil {
		b.Last = *last
	}
	return b, nil
}

// IsLockTimeout says whether a statement gave up waiting for a lock.
func (*purgeDriver) IsLockTimeout(err error) bool {
	pgErr, ok := errors.AsType[*pgconn.PgError](err)
	return ok && pgErr.Code == "55P03"
}
