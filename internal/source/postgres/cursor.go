package postgres

import (
	"context"
	"errors"
	"fmt"
	"sync"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgxpool"

	"github.com/outbox-relay/outbox-relay/internal/layout"
	"github.com/outbox-relay/outbox-relay/internal/lease"
	"github.com/outbox-relay/outbox-relay/internal/source"
)

// CursorStore is the store of a source read by capture cursor: an
// append-only table, which the relay never writes, read in batches bounded
// by transaction snapshots as PgQ reads its event tables.
//
// Each row carries the id of the transaction that inserted it (the
// layout's xid column, an xid8 defaulting to pg_current_xact_id()). The
// store's position, kept in the source's relay_state row, is a snapshot
// (pg_snapshot) every row of whose visible transactions has been handed
// on: delivered, put in retry_state, or dead-lettered. A claim reads the
// rows whose transaction is visible in a newer snapshot (its bound,
// pg_current_snapshot()) and was not in the position's, in transaction
// order and, within a transaction, in the layout's; a batch that cannot
// take them all records where it stopped in that range, and the next claim
// goes on from there up to the same bound. A transaction that began before
// others and committed after them is in progress in the position's
// snapshot, so it is read by the first claim whose bound sees it
// committed: no row is ever passed over, whatever order transactions
// commit in.
//
// The position advances in the transaction that completes a batch, with
// the batch's retries and dead letters, and only over the position the
// batch was claimed from (a version), under the lease's check as other
// stores complete. Rows to try again wait in retry_state, claimed again by
// their id once due, before the range's rows, and hold their key with
// ordering on as polling does; so do the rows a claim passes over because
// their key is held. A relay that dies loses the batches it had in flight,
// which the next claimer reads again from the recorded position.
//
// Between claims the store keeps its position in memory, ahead of what is
// recorded by the batches in flight: one claimer per source (its lease
// holder) reads it. A batch that fails or is given back voids the ones
// claimed after it (their completions fail with source.ErrPositionMoved),
// and the store reads the recorded position again once none is in flight.
type CursorStore struct {
	pool *pgxpool.Pool
	opts CursorOptions
	sql  cursorSQL
	ord  rowOrder
	idle string // the claim transaction's idle limit, in milliseconds
	// Fence binds claims to the lease they are made under; a batch
	// completes only while that lease is still held (see source.Fence).
	Fence source.Fence

	claiming sync.Mutex // one claim at a time
	mu       sync.Mutex
	// pos is where the next claim reads from: after the batches in flight.
	pos      position
	loaded   bool          // pos holds, read under lease (nil: none)
	lease    *source.Lease // the lease pos was read under
	gen      uint64        // grows when pos stops holding: claims begun before are void
	inflight int
	// retrying are the ids of the retry rows the batches in flight hold.
	retrying map[string]bool
}

// CursorOptions configure the store of one source read by capture cursor.
type CursorOptions struct {
	Source      string
	Table       Table
	RelaySchema string
	// Layout is resolved against the table (see layout.MergeUntouched);
	// its XID names the xid8 column.
	Layout *layout.Layout
	// OrderType is the type of the layout's order_by column (format_type),
	// in which a position within a range is read back.
	OrderType string
	Ordering  bool
	// ClaimTimeout ends a claim left idle longer: the database closes its
	// connection, and the batch can no longer complete. Zero means
	// DefaultClaimTimeout.
	ClaimTimeout time.Duration
	// Advice is what the table lacks for a claim to cost only its batch
	// (see CursorIndexAdvice), or "".
	Advice string
}

// position is where a cursor stands (see CursorStore).
type position struct {
	done  string // every row of a transaction visible in it is handed on (a pg_snapshot's text)
	bound string // when a range is taken in part: its bound, and after the last row taken
	after *rowPlace
	// version counts the batches recorded: a batch records its outcome
	// over the position of its version only.
	version int64
}

// rowPlace is a row's place in the order of a range: its transaction, then
// its order value and statement (when the layout orders by a column other
// than the id), then its id.
type rowPlace struct {
	xid, id    string
	order, tie *string
}

// skipCap bounds the rows of held keys a claim of limit passes over before
// it returns what it has: its reads stay within about that many rows.
func skipCap(limit int) int { return 16 * limit }

// maxSkipCommits bounds how many times a claim that found only rows of
// held keys records them and reads on.
const maxSkipCommits = 4

// NewCursor builds the store of a source read by capture cursor.
func NewCursor(pool *pgxpool.Pool, o CursorOptions) (*CursorStore, error) {
	if o.Layout.XID == "" {
		return nil, errors.New("layout.xid_column: required with capture cursor")
	}
	if o.ClaimTimeout <= 0 {
		o.ClaimTimeout = DefaultClaimTimeout
	}
	o.ClaimTimeout = max(o.ClaimTimeout, time.Second)
	return &CursorStore{
		pool: pool, opts: o,
		sql:      buildCursorSQL(o.Layout, o.Table.String(), o.RelaySchema, o.OrderType, o.Ordering),
		ord:      newRowOrder(o.Layout, "o", o.OrderType),
		idle:     fmt.Sprint(o.ClaimTimeout.Milliseconds()),
		retrying: map[string]bool{},
	}, nil
}

// LeaseFence implements lease.Fenced.
func (s *CursorStore) LeaseFence() *lease.Fence { return &s.Fence }

// ClaimAdvice implements driver.ClaimAdvisor.
func (s *CursorStore) ClaimAdvice() string { return s.opts.Advice }

// RecordStats implements source.Store: the backlog is the rows ahead of
// the recorded position and those waiting in retry_state.
func (s *CursorStore) RecordStats(ctx context.Context, st source.Stats) (source.Gauges, error) {
	return RecordStats(ctx, s.pool, s.sql.stats, s.opts.Source, s.opts.Table, st)
}

// Claim implements source.Store: the due retry rows first, then the rows
// of the range after the position.
func (s *CursorStore) Claim(ctx context.Context, limit int) (source.Batch, error) {
	s.claiming.Lock()
	defer s.claiming.Unlock()
	for range maxSkipCommits {
		b, again, err := s.claim(ctx, limit)
		if err != nil {
			return nil, fmt.Errorf("claim from %s: %w", s.opts.Table, err)
		}
		if b != nil {
			return b, nil
		}
		if !again {
			return nil, nil
		}
	}
	return nil, nil
}

// start returns the position a claim reads from, its generation and the
// retry rows in flight; false when the position must be read again and
// batches are still in flight.
func (s *CursorStore) start(ctx context.Context, l *source.Lease) (position, uint64, []string, bool, error) {
	s.mu.Lock()
	if s.loaded && s.lease == l {
		defer s.mu.Unlock()
		ids := make([]string, 0, len(s.retrying)) // not nil: <> ALL(NULL) holds for no row
		for id := range s.retrying {
			ids = append(ids, id)
		}
		return s.pos, s.gen, ids, true, nil
	}
	if s.inflight > 0 {
		s.mu.Unlock()
		return position{}, 0, nil, false, nil
	}
	s.mu.Unlock()
	// No batch is in flight and claims wait for this one: the position is
	// this claim's alone until it registers a batch.
	p, err := s.load(ctx)
	if err != nil {
		return position{}, 0, nil, false, err
	}
	s.mu.Lock()
	defer s.mu.Unlock()
	s.pos, s.loaded, s.lease = p, true, l
	s.gen++
	return s.pos, s.gen, []string{}, true, nil
}

// load reads the position recorded.
func (s *CursorStore) load(ctx context.Context) (position, error) {
	p := position{done: startSnapshot}
	var (
		done, bound, xid, order, id *string
		tie                         *int64
		version                     int64
	)
	err := s.pool.QueryRow(ctx, s.sql.load, s.opts.Source).Scan(&done, &bound, &xid, &order, &tie, &id, &version)
	if errors.Is(err, pgx.ErrNoRows) {
		return p, nil
	}
	if err != nil {
		return p, fmt.Errorf("read the position: %w", err)
	}
	p.version = version
	if done != nil {
		p.done = *done
	}
	if bound != nil && xid != nil && id != nil {
		p.bound = *bound
		p.after = &rowPlace{xid: *xid, id: *id, order: order}
		if tie != nil {
			t := fmt.Sprint(*tie)
			p.after.tie = &t
		}
	}
	return p, nil
}

// claim makes one claim: a batch, or none and whether to claim again at
// once (it recorded rows of held keys it passed over, or found the end of
// a range taken in part).
func (s *CursorStore) claim(ctx context.Context, limit int) (*cursorBatch, bool, error) {
	l := s.Fence.Get()
	from, gen, inFlight, ok, err := s.start(ctx, l)
	if err != nil || !ok {
		return nil, false, err
	}
	conn, err := s.pool.Acquire(ctx)
	if err != nil {
		return nil, false, err
	}
	b := &cursorBatch{store: s, tx: claimTx{conn}, lease: l, from: from,
		rows: make([]source.Row, 0, limit), ties: make([]int64, 0, limit), retried: make([]bool, 0, limit)}
	r, err := s.read(ctx, b, limit, inFlight)
	if err != nil {
		b.tx.end(context.WithoutCancel(ctx))
		return nil, false, err
	}
	if len(b.rows) == 0 && len(b.skipped) == 0 {
		// Nothing up to the bound: the next claim reads on from it. The
		// version stays, as nothing is recorded; a range taken in part
		// that ended here is read past at once.
		if r.exhausted {
			s.mu.Lock()
			if s.gen == gen {
				s.pos = position{done: r.bound, version: from.version}
			}
			s.mu.Unlock()
		}
		return nil, r.exhausted && from.bound != "", b.tx.end(ctx)
	}
	if len(b.rows) == 0 {
		if !s.idleNow() {
			// Rows of held keys only while batches are in flight: those
			// record the position first.
			return nil, false, b.tx.end(ctx)
		}
		// Rows of held keys only: record them and read on.
		b.to = r.next(from)
		err := b.commit(ctx, source.Outcome{})
		b.tx.end(context.WithoutCancel(ctx))
		if err != nil {
			s.lost()
			return nil, false, err
		}
		s.mu.Lock()
		s.pos = b.to
		s.mu.Unlock()
		return nil, true, nil
	}
	b.to = r.next(from)
	if !s.register(b, gen) {
		// A batch failed or was given back meanwhile: this one was read
		// from a position that no longer holds.
		return nil, false, b.tx.end(ctx)
	}
	return b, false, nil
}

// register counts b among the batches in flight and moves the position
// past it, unless the position it was read from (of generation gen) no
// longer holds.
func (s *CursorStore) register(b *cursorBatch, gen uint64) bool {
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.gen != gen {
		return false
	}
	s.pos = b.to
	s.inflight++
	for i, r := range b.rows {
		if b.retried[i] {
			s.retrying[r.ID] = true
		}
	}
	return true
}

// idleNow says whether no batch is in flight.
func (s *CursorStore) idleNow() bool {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.inflight == 0
}

// lost makes the next claim read the recorded position again, once no
// batch is in flight: the position in memory no longer holds.
func (s *CursorStore) lost() {
	s.mu.Lock()
	defer s.mu.Unlock()
	s.loaded = false
	s.gen++
}

// ended takes a batch off the store's batches in flight; ok says whether
// it recorded its outcome.
func (s *CursorStore) ended(b *cursorBatch, ok bool) {
	s.mu.Lock()
	defer s.mu.Unlock()
	s.inflight--
	for i, r := range b.rows {
		if b.retried[i] {
			delete(s.retrying, r.ID)
		}
	}
	if !ok {
		s.loaded = false
		s.gen++
	}
}

// rangeRead is what a claim read of the range after its position.
type rangeRead struct {
	bound string
	// last is the last row of the range the claim took or passed over;
	// nil when none.
	last *rowPlace
	// exhausted says no row of the range is after last.
	exhausted bool
}

// next is the position after the claim: the bound handed on when the
// range is exhausted, else the place of the last row taken in it.
func (r rangeRead) next(from position) position {
	p := position{done: from.done, bound: r.bound, after: r.last, version: from.version + 1}
	switch {
	case r.exhausted:
		p.done, p.bound, p.after = r.bound, "", nil
	case r.last == nil:
		p.bound, p.after = from.bound, from.after
	}
	return p
}

// read opens the claim's transaction and reads its rows into b: the retry
// rows due, then the rows of the range, passing over those of held keys,
// until the batch is full, the range exhausted or skipCap rows passed over.
func (s *CursorStore) read(ctx context.Context, b *cursorBatch, limit int, inFlight []string) (rangeRead, error) {
	var r rangeRead
	q := &pgx.Batch{}
	q.Queue("BEGIN")
	q.Queue(s.sql.settings, s.idle, nullIfEmpty(b.from.bound))
	q.Queue(s.sql.retry, s.opts.Source, limit, inFlight)
	s.queueRange(q, b.from.done, b.from.after, limit)
	if b.lease != nil {
		// A deposed holder claims nothing: its reads would hand rows out
		// again beside the new holder's.
		queueLeaseCheck(q, s.opts.RelaySchema, b.lease)
	}
	br := b.tx.conn.SendBatch(ctx, q)
	if _, err := br.Exec(); err != nil {
		_ = br.Close()
		return r, err
	}
	var bound string
	if err := br.QueryRow().Scan(&bound, nil, nil, nil, nil, nil, nil); err != nil {
		_ = br.Close()
		return r, fmt.Errorf("settings: %w", err)
	}
	r.bound = bound
	retried, err := s.readRows(br, 0)
	if err == nil {
		b.add(retried...)
	}
	// Rows of transactions the position saw in progress are few: room
	// for a batch is made for the newer ones.
	var parts [2][]cursorRow
	for i, size := range [2]int{0, limit} {
		if err == nil {
			parts[i], err = s.readRows(br, size)
		}
	}
	if err == nil && b.lease != nil {
		err = leaseHeld(br, b.lease)
	}
	if cerr := br.Close(); err == nil {
		err = cerr
	}
	if err != nil {
		return r, err
	}
	after, want := b.from.after, limit
	for {
		rows, exhausted := candidates(parts, want)
		taken := 0
		for _, c := range rows {
			if len(b.rows) == limit {
				break
			}
			if c.held {
				b.skipped = append(b.skipped, c)
			} else {
				b.add(c)
			}
			after, taken = &c.place, taken+1
			r.last = after
		}
		switch {
		case taken == len(rows) && exhausted:
			r.exhausted = true
			return r, nil
		case taken < len(rows) || len(b.rows) == limit || len(b.skipped) >= skipCap(limit):
			return r, nil
		}
		// Every row read was taken or passed over and the batch is not
		// full: read on, further the more rows were passed over.
		want = limit - len(b.rows) + len(b.skipped)
		q := &pgx.Batch{}
		s.queueRange(q, b.from.done, after, want)
		br := b.tx.conn.SendBatch(ctx, q)
		for i, size := range [2]int{0, want} {
			if err == nil {
				parts[i], err = s.readRows(br, size)
			}
		}
		if cerr := br.Close(); err == nil {
			err = cerr
		}
		if err != nil {
			return r, err
		}
	}
}

// candidates are the rows of a range read (its two parts, each of at most
// want rows) in the range's order, and whether the range has no row after
// them. The rows of transactions in progress in the snapshot handed on
// come before the newer ones; when they filled their read, more of them
// may follow, so the newer ones wait for the next read.
func candidates(parts [2][]cursorRow, want int) ([]cursorRow, bool) {
	switch {
	case len(parts[0]) == want:
		return parts[0], false
	case len(parts[0]) == 0:
		return parts[1], len(parts[1]) < want
	}
	return append(parts[0], parts[1]...), len(parts[1]) < want
}

// queueRange queues the two reads of the range after a place (nil: its
// start) in the snapshot handed on done.
func (s *CursorStore) queueRange(q *pgx.Batch, done string, after *rowPlace, limit int) {
	args := []any{s.opts.Source, limit, done, nil, nil}
	if s.ord.byColumn() {
		args = append(args, nil, nil)
	}
	if after != nil {
		args[3], args[4] = after.xid, after.id
		if s.ord.byColumn() {
			args[5], args[6] = after.order, after.tie
		}
	}
	for _, stmt := range s.sql.ranged {
		q.Queue(stmt, args...)
	}
}

func nullIfEmpty(s string) *string {
	if s == "" {
		return nil
	}
	return &s
}
