package source

import (
	"context"
	"fmt"
	"time"
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

// PurgeDriver is what a dialect supplies to Purge: the statements of its
// three sweeps, already bound to the run's cutoff, and the driver calls
// that run one batch of a sweep. S is the dialect's sweep.
type PurgeDriver[S any] interface {
	// OutboxSweep selects the outbox table's settled rows older than the
	// cutoff: delivered ones, and dead-lettered ones with includeDead.
	OutboxSweep(ctx context.Context, includeDead bool) (S, error)
	// DeadLetterSweep selects the source's dead letters replayed before
	// the cutoff; their audit rows are deleted beside them.
	DeadLetterSweep() S
	// RetryStateSweep selects the retry state of the source's events no
	// longer in the table.
	RetryStateSweep() S
	// PurgeBatch deletes up to limit rows of sw after cursor (nil: from
	// the start) in one transaction; with dryRun it deletes nothing and
	// counts what it would delete. A refused grant comes back wrapped in
	// the dialect's sentinel error.
	PurgeBatch(ctx context.Context, sw S, cursor *string, limit int, dryRun bool) (PurgeBatch, error)
	// IsLockTimeout says whether a batch gave up waiting for a lock.
	IsLockTimeout(err error) bool
}

// SweepCounter is a PurgeDriver that counts a dry run's sweep in one
// statement rather than batch by batch.
type SweepCounter[S any] interface {
	// CountSweep returns what sw would delete: the rows, and the dead
	// letters among them or the rows deleted beside them, as the sweep
	// has either.
	CountSweep(ctx context.Context, sw S) (rows, second int64, err error)
}

// PurgeBatch is what one batch found and deleted (or would delete).
type PurgeBatch struct {
	Found   int    // rows the batch selected
	Last    string // the last key selected, "" for none
	Deleted int64  // rows deleted
	Dead    int64  // dead letters among them
	Beside  int64  // rows deleted beside them (audit rows)
}

// PurgeRun names what a retention run deletes, for its messages, and says
// how it goes.
type PurgeRun struct {
	Table  string // the outbox table, as messages name it
	Relay  string // the relay's schema or database, as messages name it
	Source string
	// KeptRows: no row of the table is deleted, as the layout deletes its
	// rows itself (mode delete) or the relay never writes to the table
	// (capture cursor, layout.ModeNone).
	KeptRows bool
	PurgeOptions
}

// Purge deletes, in batches, the settled rows of one outbox table older
// than r.OlderThan (delivered ones, and with r.IncludeDead dead-lettered
// ones), then prunes the relay's own tables for the source: dead letters
// replayed before the cutoff with their audit rows, and retry state of
// events no longer in the table. Each batch is its own transaction; a
// batch that gives up on a lock is tried again after the pause, at most
// a few times in a row. A dry run counts and deletes nothing.
//
// On error the result counts what was deleted before it.
func Purge[S any](ctx context.Context, d PurgeDriver[S], r PurgeRun) (PurgeResult, error) {
	var res PurgeResult
	if r.OlderThan < 0 {
		return res, fmt.Errorf("purge %s: negative age %s", r.Table, r.OlderThan)
	}
	r.BatchSize = orDefault(r.BatchSize, DefaultPurgeBatch)
	p := &purger[S]{d: d, r: r}
	if r.KeptRows {
		res.KeptByLayout = true
	} else {
		sw, err := d.OutboxSweep(ctx, r.IncludeDead)
		if err != nil {
			return res, fmt.Errorf("purge %s: %w", r.Table, err)
		}
		t, err := p.run(ctx, sw)
		res.Published, res.Dead, res.Batches = t.Deleted-t.Dead, t.Dead, t.batches
		if err != nil {
			return res, fmt.Errorf("purge %s: %w", r.Table, err)
		}
	}
	t, err := p.run(ctx, d.DeadLetterSweep())
	res.FailedEvents, res.Audit = t.Deleted, t.Beside
	if err != nil {
		return res, fmt.Errorf("prune %s.failed_events of %s: %w", r.Relay, r.Table, err)
	}
	t, err = p.run(ctx, d.RetryStateSweep())
	res.RetryState = t.Deleted
	if err != nil {
		return res, fmt.Errorf("prune %s.retry_state of %s: %w", r.Relay, r.Source, err)
	}
	return res, nil
}

// PurgeTimeouts fills in the defaults of a purge batch's lock and
// statement timeouts.
func PurgeTimeouts(lock, stmt time.Duration) (time.Duration, time.Duration) {
	return orDefault(lock, DefaultPurgeLockTimeout), orDefault(stmt, DefaultPurgeStmtTimeout)
}

func orDefault[T int | time.Duration](v, def T) T {
	if v <= 0 {
		return def
	}
	return v
}

// purger runs one retention run's sweeps.
type purger[S any] struct {
	d PurgeDriver[S]
	r PurgeRun
}

// totals add up a sweep's batches.
type totals struct {
	PurgeBatch
	batches int
}

// run deletes what sw selects, batch after batch, each starting after the
// key the previous one ended at, until a batch finds fewer rows than it
// may take.
func (p *purger[S]) run(ctx context.Context, sw S) (totals, error) {
	var t totals
	if c, ok := p.d.(SweepCounter[S]); ok && p.r.DryRun {
		n, second, err := c.CountSweep(ctx, sw)
		if err != nil {
			return t, fmt.Errorf("count: %w", err)
		}
		t.Deleted, t.Dead, t.Beside = n, second, second
		return t, nil
	}
	var (
		cursor  *string
		retries int
	)
	for {
		if t.batches > 0 || retries > 0 {
			if err := sleep(ctx, p.r.Pause); err != nil {
				return t, err
			}
		}
		b, err := p.d.PurgeBatch(ctx, sw, cursor, p.r.BatchSize, p.r.DryRun)
		if err != nil {
			if p.d.IsLockTimeout(err) && retries < purgeLockRetries && ctx.Err() == nil {
				retries++
				continue
			}
			return t, fmt.Errorf("batch %d: %w", t.batches+1, err)
		}
		retries = 0
		t.batches++
		t.Deleted += b.Deleted
		t.Dead += b.Dead
		t.Beside += b.Beside
		if b.Found < p.r.BatchSize || b.Last == "" {
			return t, nil
		}
		cursor = &b.Last
	}
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
