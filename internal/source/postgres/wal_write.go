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
	t := time.NewTicker(r.s.opts.FlushEvery)
	defer t.Stop()
	for {
		select {
		case <-ctx.Done():
			return nil
		case <-t.C:
		}
		if err := r.writeDue(ctx); err != nil {
			if ctx.Err() != nil {
				return nil
			}
			if errors.Is(err, source.ErrLeaseLost) {
				return err
			}
			r.s.opts.Logger.Warn("table write of delivered rows failed; tried again", "source", r.s.opts.Source, "err", err)
		}
	}
}

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
