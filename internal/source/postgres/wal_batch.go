package postgres

import (
	"context"
	"errors"
	"fmt"
	"strings"
	"sync/atomic"

	"github.com/jackc/pgx/v5"

	"github.com/outbox-relay/outbox-relay/internal/layout"
	"github.com/outbox-relay/outbox-relay/internal/source"
)

// walBacklogSQL reads the rows pending in table as a claim selects them
// (see rowSelect) and in a claim's order, then when their retry is due
// (microseconds since the epoch): $1 source. It is the query of a cursor
// read a page at a time in the slot's snapshot.
func walBacklogSQL(l *layout.Layout, table, relaySchema string) string {
	cols := rowSelect(l, "o", attemptsSQL(l), "NULL::tid", tieSQL, "r.event_id IS NOT NULL")
	cols = append(cols, "(extract(epoch FROM r.next_attempt_at) * 1000000)::bigint")
	id := sq.Col("o", l.ID.Name)
	order := []string{sq.Col("o", l.OrderBy)}
	if l.OrderBy != l.ID.Name {
		order = append(order, tieSQL, id)
	}
	return "SELECT " + strings.Join(cols, ", ") + " FROM " + table + " o LEFT JOIN " + QuoteIdent(relaySchema) +
		".retry_state r ON r.source = $1 AND r.event_id = " + id + "::text WHERE " + sq.Pending(l, "o") +
		" ORDER BY " + strings.Join(order, ", ")
}

// walPendingSQL selects which of the rows with ids $1 are pending in table.
func walPendingSQL(l *layout.Layout, table string) string {
	id := sq.Col("o", l.ID.Name)
	return "SELECT " + id + "::text FROM " + table + " o WHERE " + id + " = ANY($1::text[]::" + l.ID.Type + "[]) AND " + sq.Pending(l, "o")
}

// fenced runs the statements body queues in one transaction behind the
// check of lease l (nil: none), in one round trip: a lost lease fails the
// check, and nothing behind it commits.
func (s *WALStore) fenced(ctx context.Context, l *source.Lease, body func(q *pgx.Batch)) error {
	conn, err := s.pool.Acquire(ctx)
	if err != nil {
		return err
	}
	tx := claimTx{conn}
	defer tx.end(context.WithoutCancel(ctx))
	q := &pgx.Batch{}
	q.Queue("BEGIN")
	if l != nil {
		queueLeaseCheck(q, s.opts.RelaySchema, l)
	}
	body(q)
	q.Queue("COMMIT")
	br := conn.SendBatch(ctx, q)
	_, err = br.Exec()
	if err == nil && l != nil {
		err = leaseHeld(br, l)
	}
	if cerr := br.Close(); err == nil {
		err = cerr
	}
	return err
}

// walBatch is a claim of capture wal: rows of its stream's book.
type walBatch struct {
	run   *walRun
	rows  []*walRow
	out   []source.Row
	ended atomic.Bool
}

func (b *walBatch) Rows() []source.Row { return b.out }

// Release implements source.Batch: the rows go back to the claims.
func (b *walBatch) Release(context.Context) error {
	if !b.ended.CompareAndSwap(false, true) {
		return nil
	}
	b.run.mu.Lock()
	b.run.book.requeue(b.rows)
	b.run.mu.Unlock()
	return nil
}

// Complete implements source.Batch: the retries and the dead letters (their
// state in the table too) commit in one transaction under the lease's
// check, as polling writes them; delivered rows are settled by the
// stream's writer (see walRun.write). Rows in no list go back to the
// claims. A batch of a stream that ended records nothing
// (source.ErrPositionMoved): the next stream brings its rows again.
func (b *walBatch) Complete(ctx context.Context, o source.Outcome) error {
	r := b.run
	s := r.s
	if !b.ended.CompareAndSwap(false, true) {
		return fmt.Errorf("complete batch on %s: %w", s.opts.Table, errBatchEnded)
	}
	if err := r.error(); err != nil {
		return fmt.Errorf("complete batch on %s: %w (%v)", s.opts.Table, source.ErrPositionMoved, err)
	}
	c := source.PlanCompletion(b.out, o, func(i int) bool { return b.rows[i].retrying })
	// Delivered rows forget their retry state with their table write.
	c.Published, c.Forget = nil, nil
	for _, d := range c.Dead {
		if b.rows[d.Index].retrying {
			c.Forget = append(c.Forget, d.ID)
		}
	}
	if len(c.Retry) > 0 || len(c.Dead) > 0 {
		w := b.completion()
		err := source.WriteCompletion(ctx, w, c, false)
		if err == nil {
			err = s.fenced(ctx, r.lease, func(q *pgx.Batch) { q.QueuedQueries = append(q.QueuedQueries, w.q.QueuedQueries...) })
		}
		if err != nil {
			r.mu.Lock()
			b.run.book.requeue(b.rows)
			r.mu.Unlock()
			if errors.Is(err, source.ErrLeaseLost) {
				r.fail(err)
			}
			return fmt.Errorf("complete batch on %s: %w", s.opts.Table, err)
		}
	}
	r.mu.Lock()
	for _, i := range o.Published {
		r.book.published(b.rows[i])
	}
	for _, rt := range o.Retry {
		r.book.backOff(b.rows[rt.Index], rt.Attempts, rt.At)
	}
	dead := make([]*walRow, len(o.Dead))
	for i, d := range o.Dead {
		dead[i] = b.rows[d.Index]
	}
	r.book.settle(dead)
	r.book.requeue(b.rows)
	r.advance()
	r.mu.Unlock()
	signal(r.written)
	signal(r.room)
	return nil
}

// walCompletion queues a wal batch's retries and dead letters
// (source.CompletionWriter): the relay's tables' (relayWrites), and the
// rows' state in the table. Its lease check is never queued: the
// transaction is fenced (WALStore.fenced).
type walCompletion struct {
	relayWrites
	b *walBatch
}

func (b *walBatch) completion() *walCompletion {
	s := b.run.s
	ties := make([]int64, len(b.rows))
	for i, r := range b.rows {
		ties[i] = r.tie
	}
	return &walCompletion{b: b, relayWrites: relayWrites{relaySQL: s.sql.relaySQL, relaySchema: s.opts.RelaySchema,
		source: s.opts.Source, table: s.opts.Table, rows: b.out, ties: ties}}
}

// CheckLease is never called: the transaction is fenced (WALStore.fenced).
func (w *walCompletion) CheckLease(context.Context) error { return nil }

func (w *walCompletion) RecordRetries(_ context.Context, rs []source.Retry) error {
	w.retriesInTable(w.b.run.s.sql.retryRow, rs)
	return nil
}

func (w *walCompletion) DeadLetter(_ context.Context, ds []source.DeadLetter) error {
	s := w.b.run.s
	w.deadInTable(s.sql.dead, s.opts.Layout.Mode == "delete", ds)
	return nil
}
