package postgres

import (
	"context"
	"errors"
	"fmt"
	"strconv"
	"sync/atomic"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgconn"

	"github.com/outbox-relay/outbox-relay/internal/source"
)

// cursorRow is a row a cursor's claim read: the row, its place in the
// range's order and whether its key is held.
type cursorRow struct {
	row      source.Row
	place    rowPlace
	tie      int64
	retrying bool // read from retry_state
	held     bool
}

// readRows reads the rows of one claim statement (see cursorSQL): the
// row's columns, then its transaction, order value and whether its key is
// held.
func (s *CursorStore) readRows(br pgx.BatchResults, limit int) ([]cursorRow, error) {
	rows, err := br.Query()
	if err != nil {
		return nil, err
	}
	defer rows.Close()
	extras := len(s.opts.Layout.Extra)
	out := make([]cursorRow, 0, limit)
	for rows.Next() {
		vals, fds := rows.RawValues(), rows.FieldDescriptions()
		var c cursorRow
		if err := DecodeRow(vals, fds, &c.row, extras); err != nil {
			return nil, fmt.Errorf("decode: %w", err)
		}
		if c.tie, err = decodeInt8(vals[colTie], fds[colTie].Format); err != nil {
			return nil, fmt.Errorf("decode: statement: %w", err)
		}
		if c.retrying, err = decodeBool(vals[colRetrying], fds[colRetrying].Format); err != nil {
			return nil, fmt.Errorf("decode: retrying: %w", err)
		}
		k := numClaimCols + extras
		c.place = rowPlace{xid: string(vals[k]), id: c.row.ID}
		if s.ord.byColumn() {
			order, tie := string(vals[k+1]), strconv.FormatInt(c.tie, 10)
			c.place.order, c.place.tie = &order, &tie
		}
		if c.held, err = decodeBool(vals[k+2], fds[k+2].Format); err != nil {
			return nil, fmt.Errorf("decode: held: %w", err)
		}
		out = append(out, c)
	}
	return out, rows.Err()
}

// cursorBatch is a cursor's claim, held by its open transaction until it
// completes (or is given back).
type cursorBatch struct {
	store *CursorStore
	tx    claimTx
	lease *source.Lease
	// from is the position the batch was claimed from, to the one after
	// it: the batch records to over from.
	from, to position
	rows     []source.Row
	ties     []int64
	retried  []bool      // the row came from retry_state
	skipped  []cursorRow // rows of held keys the claim passed over
	ended    atomic.Bool
}

func (b *cursorBatch) add(cs ...cursorRow) {
	for _, c := range cs {
		b.rows, b.ties, b.retried = append(b.rows, c.row), append(b.ties, c.tie), append(b.retried, c.retrying)
	}
}

func (b *cursorBatch) Rows() []source.Row { return b.rows }

// Release implements source.Batch: nothing is recorded, and the batches
// claimed after this one are void (the next claim reads the rows again).
func (b *cursorBatch) Release(ctx context.Context) error {
	if !b.ended.CompareAndSwap(false, true) {
		return nil
	}
	err := b.tx.end(ctx)
	b.store.ended(b, false)
	if err != nil {
		return fmt.Errorf("release claim: %w", err)
	}
	return nil
}

// Complete implements source.Batch: the lease check, the position's
// advance, the retries, dead letters and retry state forgotten, and
// COMMIT are one round trip. Delivered rows are recorded by the position
// alone; rows in no list wait in retry_state, due at once, as do the rows
// of held keys the claim passed over.
func (b *cursorBatch) Complete(ctx context.Context, o source.Outcome) error {
	if !b.ended.CompareAndSwap(false, true) {
		return fmt.Errorf("complete batch on %s: %w", b.store.opts.Table, errBatchEnded)
	}
	err := b.commit(ctx, o)
	b.tx.end(context.WithoutCancel(ctx))
	b.store.ended(b, err == nil)
	return err
}

// commit records the batch's outcome and the position after it in its
// transaction, and commits it.
func (b *cursorBatch) commit(ctx context.Context, o source.Outcome) error {
	s := b.store
	// The table is never written: the relay's tables alone, delivered rows
	// recorded by the position's advance.
	w := &relayWrites{relaySQL: s.sql.relaySQL, relaySchema: s.opts.RelaySchema, lease: b.lease, source: s.opts.Source,
		table: s.opts.Table, rows: b.rows, ties: b.ties}
	c := source.PlanCompletion(b.rows, o, func(i int) bool { return b.retried[i] })
	if err := source.WriteCompletion(ctx, w, c, b.lease != nil); err != nil {
		return fmt.Errorf("complete batch on %s: %w", s.opts.Table, err)
	}
	b.queueRequeue(&w.q, o)
	w.q.Queue(s.sql.advance, b.advanceArgs()...)
	w.q.Queue("COMMIT")
	br := b.tx.conn.SendBatch(ctx, &w.q)
	var err error
	if b.lease != nil {
		err = leaseHeld(br, b.lease)
	}
	if cerr := br.Close(); err == nil {
		err = cerr
	}
	if pgErr := (*pgconn.PgError)(nil); errors.As(err, &pgErr) && pgErr.Code == "22012" {
		// The advance found another position than the batch's.
		err = fmt.Errorf("%w (the batch was claimed at version %d)", source.ErrPositionMoved, b.from.version)
	}
	if err != nil {
		return fmt.Errorf("complete batch on %s: %w", s.opts.Table, err)
	}
	return nil
}

// queueRequeue queues the rows to wait in retry_state, due at once: rows
// of the range in no list of o, and the rows of held keys passed over.
func (b *cursorBatch) queueRequeue(q *pgx.Batch, o source.Outcome) {
	settled := make([]bool, len(b.rows))
	for _, i := range o.Published {
		settled[i] = true
	}
	for _, r := range o.Retry {
		settled[r.Index] = true
	}
	for _, d := range o.Dead {
		settled[d.Index] = true
	}
	var ids, keys, errs []string
	var ties []int64
	for i, r := range b.rows {
		if !settled[i] && !b.retried[i] {
			ids, keys, errs, ties = append(ids, r.ID), append(keys, r.OrderKey), append(errs, ""), append(ties, b.ties[i])
		}
	}
	for _, c := range b.skipped {
		ids, keys, ties = append(ids, c.row.ID), append(keys, c.row.OrderKey), append(ties, c.tie)
		errs = append(errs, "held: an earlier event of its key backs off")
	}
	if len(ids) > 0 {
		q.Queue(b.store.sql.requeue, b.store.opts.Source, ids, keys, errs, ties)
	}
}

// advanceArgs are the arguments of the position's advance (cursorSQL.advance).
func (b *cursorBatch) advanceArgs() []any {
	s, p := b.store, b.to
	args := []any{s.opts.Source, s.opts.Table.Schema, s.opts.Table.Name, p.done, nullIfEmpty(p.bound), nil, nil, nil, nil, b.from.version}
	if a := p.after; a != nil {
		args[5], args[6], args[7], args[8] = a.xid, a.order, a.tie, a.id
	}
	return args
}
