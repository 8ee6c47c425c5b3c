package postgres

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"sync"
	"time"

	"github.com/jackc/pglogrepl"
	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgconn"
	"github.com/jackc/pgx/v5/pgxpool"

	"github.com/outbox-relay/outbox-relay/internal/layout"
	"github.com/outbox-relay/outbox-relay/internal/lease"
	"github.com/outbox-relay/outbox-relay/internal/source"
)

// WALStore is the store of a source read by capture wal: the table's
// inserts come from PostgreSQL's logical replication instead of claims.
//
// Each source has a publication of its table, inserts only, named
// WALName(relay schema, source), and a logical replication slot (pgoutput)
// named WALSlotName(database, relay schema, source): slots are the
// server's, publications their database's.
// The holder of the source's lease streams the slot from its confirmed
// position: each transaction's inserts into the table are assembled and
// released at its Commit, in commit order, its rows in the order they were
// written. Each row is rendered by the layout's templates in Go (see
// walRowOf) and held in memory (walBook) until it is settled; claims hand
// the held rows out in stream order, passing over rows in flight and, with
// ordering, the rows of a key whose earlier row backs off.
//
// A batch's completion writes what polling writes, under the lease's
// check, in one transaction: retry state (and the table's retry columns)
// for rows to try again, the dead letters and their table state. Delivered
// rows are settled in the background, batched: their state in the table
// (the published flag, timestamp or status; deleted where the layout
// deletes) and their retry state forgotten, fenced alike. The slot
// confirms a transaction only once every row of it is settled (a
// watermark over the transactions in commit order), so a relay that dies
// at any point resumes from the slot with nothing lost and only the rows
// then in flight sent again.
//
// When the slot is created it exports a snapshot: the rows still pending in
// the table that it sees (written before the switch from polling) are read
// in that snapshot, in a claim's order, and come first, then the stream from the slot's
// consistent point. The publication's comment records whether those rows
// were all settled (walBacklogDone): a holder that finds the slot without
// it drops the slot and makes it again, reading the rows then pending.
type WALStore struct {
	pool *pgxpool.Pool
	opts WALOptions
	sql  statements
	// name is the publication's, slot the replication slot's; backlog
	// reads the pending rows in the slot's snapshot, pending which of the
	// rows with ids $1 are.
	name, slot, backlog, pending string
	// Fence binds the stream to the lease it runs under: it stops when the
	// lease changes, and every write checks it.
	Fence source.Fence

	// wake signals that the stream released rows.
	wake chan struct{}

	mu  sync.Mutex
	run *walRun
}

// WALOptions configure the store of a source read by capture wal.
type WALOptions struct {
	Source      string
	Table       Table
	RelaySchema string
	Layout      *layout.Layout
	Ordering    bool
	// Conn is how to connect to the database: the replication connection
	// is made from a copy of it.
	Conn *pgconn.Config
	// Logger, when set, logs the slot's creation and the stream's end.
	Logger *slog.Logger
	// MaxRows bounds the rows held in memory: the stream stops reading
	// past it (a transaction is released whole, so one larger is held
	// whole). Default 10000.
	MaxRows int
	// FlushEvery is how often delivered rows' table writes are committed
	// (default 100ms); StatusEvery how often the slot's position is sent
	// (default 1s).
	FlushEvery, StatusEvery time.Duration
}

// NewWAL builds the store of a source read by capture wal; the layout must
// be resolved against the table. Nothing is created until OpenWAL or the
// first claim.
func NewWAL(pool *pgxpool.Pool, o WALOptions) *WALStore {
	if o.MaxRows <= 0 {
		o.MaxRows = 10000
	}
	if o.FlushEvery <= 0 {
		o.FlushEvery = 100 * time.Millisecond
	}
	if o.StatusEvery <= 0 {
		o.StatusEvery = time.Second
	}
	if o.Logger == nil {
		o.Logger = slog.New(slog.DiscardHandler)
	}
	return &WALStore{pool: pool, opts: o,
		sql:     buildStatements(o.Layout, o.Table.String(), o.RelaySchema, o.Ordering, DefaultClaimTimeout, source.Bucket{}, nil),
		name:    WALName(o.RelaySchema, o.Source),
		slot:    WALSlotName(o.Conn.Database, o.RelaySchema, o.Source),
		backlog: walBacklogSQL(o.Layout, o.Table.String(), o.RelaySchema),
		pending: walPendingSQL(o.Layout, o.Table.String()),
		wake:    make(chan struct{}, 1),
	}
}

// OpenWAL builds the store and creates the source's publication when it is
// missing (see EnsurePublication).
func OpenWAL(ctx context.Context, pool *pgxpool.Pool, o WALOptions) (*WALStore, error) {
	s := NewWAL(pool, o)
	if err := s.EnsurePublication(ctx); err != nil {
		return nil, err
	}
	return s, nil
}

// Name is the source's publication.
func (s *WALStore) Name() string { return s.name }

// Slot is the source's replication slot.
func (s *WALStore) Slot() string { return s.slot }

// Wake implements driver.Waker: it signals when the stream released rows.
func (s *WALStore) Wake() <-chan struct{} { return s.wake }

// LeaseFence implements lease.Fenced.
func (s *WALStore) LeaseFence() *lease.Fence { return &s.Fence }

// RecordStats implements source.Store: the backlog is the rows pending in
// the table; the slot's gauges are the WAL it keeps on the server and the
// WAL written since its confirmed position, once it exists.
func (s *WALStore) RecordStats(ctx context.Context, st source.Stats) (source.Gauges, error) {
	g, err := RecordStats(ctx, s.pool, s.sql.stats, s.opts.Source, s.opts.Table, st)
	if err != nil {
		return g, err
	}
	var sg source.SlotGauges
	err = s.pool.QueryRow(ctx, `SELECT COALESCE(pg_wal_lsn_diff(pg_current_wal_lsn(), restart_lsn), 0)::bigint,
  COALESCE(pg_wal_lsn_diff(pg_current_wal_lsn(), confirmed_flush_lsn), 0)::bigint
FROM pg_replication_slots WHERE slot_name = $1`, s.slot).Scan(&sg.RetainedBytes, &sg.LagBytes)
	switch {
	case errors.Is(err, pgx.ErrNoRows):
		return g, nil // not made yet
	case err != nil:
		return g, fmt.Errorf("read slot %s: %w", s.slot, err)
	}
	g.Slot = &sg
	return g, nil
}

// Close stops the stream, if any, and waits until it has ended.
func (s *WALStore) Close() {
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.run != nil {
		s.run.stop()
		s.run = nil
	}
}

// Claim implements source.Store: the held rows in stream order (see
// walBook.claim). The first claim under a lease starts the stream.
func (s *WALStore) Claim(ctx context.Context, limit int) (source.Batch, error) {
	r, err := s.current()
	if err != nil {
		return nil, fmt.Errorf("claim from %s: %w", s.opts.Table, err)
	}
	r.mu.Lock()
	rows := r.book.claim(limit, time.Now())
	r.mu.Unlock()
	if len(rows) == 0 {
		return nil, nil
	}
	b := &walBatch{run: r, rows: rows, out: make([]source.Row, len(rows))}
	for i, w := range rows {
		b.out[i] = w.row
	}
	return b, nil
}

// current returns the stream of the lease the store is fenced by now,
// started on first use. A stream that failed is stopped and its error
// returned once; the next claim starts another from the slot.
func (s *WALStore) current() (*walRun, error) {
	l := s.Fence.Get()
	s.mu.Lock()
	defer s.mu.Unlock()
	if r := s.run; r != nil {
		err := r.error()
		if r.lease == l && err == nil {
			return r, nil
		}
		r.stop()
		s.run = nil
		if err != nil && !errors.Is(err, errWALStopped) {
			return nil, err
		}
	}
	s.run = startWALRun(s, l)
	return s.run, nil
}

// errWALStopped ends a stream stopped on purpose.
var errWALStopped = errors.New("the stream was stopped")

// walRun is the stream of one lease term: the replication connection's
// reader (stream), the writer of delivered rows (write) and the rows
// between them.
type walRun struct {
	s      *WALStore
	lease  *source.Lease
	cancel context.CancelFunc
	done   chan struct{}

	mu     sync.Mutex
	book   walBook
	failed error
	// confirmed is where the slot may confirm: the end of the last
	// transaction passed by the watermark, or the stream's position while
	// nothing is held.
	confirmed pglogrepl.LSN
	// replayUntil is where the WAL stood when the stream resumed from
	// the slot: transactions that end before it may be brought again.
	replayUntil pglogrepl.LSN
	// room wakes the stream when rows settle, written the writer when rows
	// are delivered, moved the stream when confirmed moves.
	room, written, moved chan struct{}
}

func startWALRun(s *WALStore, l *source.Lease) *walRun {
	ctx, cancel := context.WithCancel(context.Background())
	r := &walRun{s: s, lease: l, cancel: cancel, done: make(chan struct{}),
		book: walBook{ordering: s.opts.Ordering},
		room: make(chan struct{}, 1), written: make(chan struct{}, 1), moved: make(chan struct{}, 1)}
	var wg sync.WaitGroup
	for _, f := range []func(context.Context) error{r.stream, r.write} {
		wg.Go(func() { r.fail(f(ctx)) })
	}
	go func() {
		wg.Wait()
		close(r.done)
	}()
	return r
}

// fail records the first error that ends the run and stops the rest of it.
func (r *walRun) fail(err error) {
	if err == nil {
		err = errWALStopped
	}
	r.mu.Lock()
	if r.failed == nil {
		r.failed = err
		if !errors.Is(err, errWALStopped) && !errors.Is(err, context.Canceled) {
			r.s.opts.Logger.Warn("wal stream ended", "source", r.s.opts.Source, "slot", r.s.slot, "err", err)
		}
	}
	r.mu.Unlock()
	r.cancel()
}

func (r *walRun) error() error {
	r.mu.Lock()
	defer r.mu.Unlock()
	return r.failed
}

// stop ends the run and waits until its connections are closed.
func (r *walRun) stop() {
	r.fail(errWALStopped)
	<-r.done
}

// leased ends the run when the store's lease is no longer the run's: the
// worker of that lease has stopped, and the next holder streams anew.
func (r *walRun) leased() error {
	if r.s.Fence.Get() != r.lease {
		return errWALStopped
	}
	return nil
}

func signal(c chan struct{}) {
	select {
	case c <- struct{}{}:
	default:
	}
}

// advance moves confirmed past the transactions the watermark passes; it
// returns the snapshot's rows when their comment must be written first.
// Called with r.mu held.
func (r *walRun) advance() *walTx {
	end, mark := r.book.advance()
	if end > r.confirmed {
		r.confirmed = end
		signal(r.moved)
	}
	return mark
}
