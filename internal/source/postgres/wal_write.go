package postgres

import (
	"context"
	"errors"
	"fmt"
	"time"

	"github.com/jackc/pgx/v5"

	"github.com/outbox-relay/outbox-relay/internal/source"
)

// walWriteMax bounds the rows one table write settles.
const walWriteMax = 5000

// write settles delivered rows every FlushEvery, off the claim and publish
// path: their state in the table (see statements.markByID) and their retry
// state forgotten, in one transaction under the lease's check. Once the
// snapshot's rows are all settled it writes the publication's comment
// that says so, before the slot may confirm past them.
func (r *walRun) write(ctx context.Context) error {
	every := r.s.opts.FlushEvery
	wait := every
	for {
		select {
		case <-ctx.Done():
			// The rows delivered last are written still, while the lease
			// is: else the next stream brings them again.
			fctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), walFinalWrite)
			defer cancel()
			_ = r.writeDue(fctx)
			return nil
		case <-time.After(wait):
		}
		err := r.writeDue(ctx)
		switch {
		case err == nil:
			wait = every
		case ctx.Err() != nil:
		case errors.Is(err, source.ErrLeaseLost):
			return err
		default:
			wait = min(2*wait, walWriteMaxWait)
			r.s.opts.Logger.Warn("table write of delivered rows failed; tried again", "source", r.s.opts.Source,
				"retry_in", wait, "err", err)
		}
	}
}

// walFinalWrite bounds the last table write of a stream that stops, and
// walWriteMaxWait the wait after failed ones.
const (
	walFinalWrite   = 5 * time.Second
	walWriteMaxWait = 5 * time.Second
)

// writeDue writes the delivered rows due and the comment when due.
func (r *walRun) writeDue(ctx context.Context) error {
	r.mu.Lock()
	rows := r.book.toWrite()
	r.mu.Unlock()
	for len(rows) > 0 {
		n := min(len(rows), walWriteMax)
		if err := r.writeRows(ctx, rows[:n]); err != nil {
			r.mu.Lock()
			r.book.unwritten(rows)
			r.mu.Unlock()
			return err
		}
		r.mu.Lock()
		r.book.settle(rows[:n])
		r.advance()
		r.mu.Unlock()
		signal(r.room)
		rows = rows[n:]
	}
	r.mu.Lock()
	mark := r.advance()
	r.mu.Unlock()
	if mark == nil {
		return nil
	}
	if err := r.comment(ctx, walBacklogDone); err != nil {
		return err
	}
	r.mu.Lock()
	mark.mark = false
	r.advance()
	r.mu.Unlock()
	return nil
}

// writeRows writes delivered rows' state in the table and forgets their
// retry state.
func (r *walRun) writeRows(ctx context.Context, rows []*walRow) error {
	s := r.s
	ids := make([]string, len(rows))
	var forget []string
	for i, w := range rows {
		ids[i] = w.row.ID
		if w.retrying {
			forget = append(forget, w.row.ID)
		}
	}
	err := s.fenced(ctx, r.lease, func(q *pgx.Batch) {
		if s.sql.ackBatchID {
			q.Queue(s.sql.markByID, ids, source.NewBatchID())
		} else {
			q.Queue(s.sql.markByID, ids)
		}
		if len(forget) > 0 {
			q.Queue(s.sql.clearRetry, s.opts.Source, forget)
		}
	})
	if err != nil {
		return fmt.Errorf("write delivered rows in %s: %w", s.opts.Table, err)
	}
	return nil
}
