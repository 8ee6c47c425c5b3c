// Package postgres implements the source seam for PostgreSQL: claims with
// SELECT ... FOR UPDATE SKIP LOCKED inside a transaction that stays open
// while the batch is published, so a crashed relay's claims vanish with its
// connection; acknowledgement, retry scheduling and dead-lettering commit in
// that same transaction.
package postgres

import (
	"cmp"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"sync/atomic"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgconn"
	"github.com/jackc/pgx/v5/pgtype"
	"github.com/jackc/pgx/v5/pgxpool"

	"github.com/outbox-relay/outbox-relay/internal/layout"
	"github.com/outbox-relay/outbox-relay/internal/source"
)

// Table names an outbox table.
type Table struct {
	Schema, Name string
}

// String is the quoted, schema-qualified name.
func (t Table) String() string { return pgx.Identifier{t.Schema, t.Name}.Sanitize() }

// DefaultClaimTimeout is how long a claim may stay idle before the database
// ends it, and how old another relay's unfinished claim must be before its
// rows are taken back.
const DefaultClaimTimeout = 10 * time.Minute

// Options configure one source's store.
type Options struct {
	Source      string // the source's name
	Table       Table
	RelaySchema string
	Layout      *layout.Layout
	Ordering    bool
	// ClaimTimeout ends a claim left idle longer (the database closes its
	// connection, so a hung relay's rows go back to the pending set), and
	// is how old another relay's unfinished claim must be before its rows
	// are taken back. Zero means DefaultClaimTimeout.
	ClaimTimeout time.Duration
	// Bucket is the part of the source the store claims (see
	// source.Bucket); the zero value is the whole source.
	Bucket source.Bucket
	// Priority, when set, has the claims take some rows first (see
	// source.Priority); not with a bucket of a source, with ordering.
	Priority *source.Priority
}

// Store is the PostgreSQL store of one source.
type Store struct {
	pool *pgxpool.Pool
	opts Options
	sql  statements
	idle string // the claim transaction's idle limit, in milliseconds
	// held counts the batches claimed and not yet completed or released:
	// their rows are locked, and the next claim's window reaches past them.
	held atomic.Int64
	// own are the addresses of those batches' rows, for a claim that must
	// tell them from rows another claimer locked (a bucket's, see
	// bucketClaim); nil for other claims.
	own *ownRows
	// bucketWindow sizes the window of a bucket's claims.
	bucketWindow source.BucketWindow
	// Fence binds claims to the lease they are made under; a batch
	// completes only while that lease is still held (see source.Fence).
	Fence source.Fence
}

// New builds the store of one source; the layout must be resolved against the
// table (see Columns).
func New(pool *pgxpool.Pool, opts Options) *Store {
	if opts.ClaimTimeout <= 0 {
		opts.ClaimTimeout = DefaultClaimTimeout
	}
	opts.ClaimTimeout = max(opts.ClaimTimeout, time.Second)
	s := &Store{
		pool: pool, opts: opts,
		sql:  buildStatements(opts.Layout, opts.Table.String(), opts.RelaySchema, opts.Ordering, opts.ClaimTimeout, opts.Bucket, opts.Priority),
		idle: fmt.Sprint(opts.ClaimTimeout.Milliseconds()),
	}
	if s.sql.claim.ownRows {
		s.own = &ownRows{}
	}
	return s
}

// Columns describes the table's columns, for layout.Resolve.
func Columns(ctx context.Context, pool *pgxpool.Pool, t Table) ([]layout.Column, error) {
	rows, err := pool.Query(ctx, `SELECT a.attname, format_type(a.atttypid, a.atttypmod),
  a.attidentity <> '' OR COALESCE(pg_get_expr(d.adbin, d.adrelid) LIKE 'nextval(%', false)
FROM pg_attribute a
JOIN pg_class c ON c.oid = a.attrelid
JOIN pg_namespace n ON n.oid = c.relnamespace
LEFT JOIN pg_attrdef d ON d.adrelid = a.attrelid AND d.adnum = a.attnum
WHERE n.nspname = $1 AND c.relname = $2 AND a.attnum > 0 AND NOT a.attisdropped
ORDER BY a.attnum`, t.Schema, t.Name)
	if err != nil {
		return nil, fmt.Errorf("describe %s: %w", t, err)
	}
	cols, err := pgx.CollectRows(rows, func(r pgx.CollectableRow) (layout.Column, error) {
		var c layout.Column
		err := r.Scan(&c.Name, &c.Type, &c.Serial)
		return c, err
	})
	if err != nil {
		return nil, fmt.Errorf("describe %s: %w", t, err)
	}
	if len(cols) == 0 {
		return nil, fmt.Errorf("%w: %s (or not visible to this role)", source.ErrNoTable, t)
	}
	return cols, nil
}

// Claim implements source.Store. The claim's transaction is opened in the
// claim's own round trip: BEGIN, the claim's settings, the claim and, under
// a lease, the lease check are one pipeline.
func (s *Store) Claim(ctx context.Context, limit int) (source.Batch, error) {
	conn, err := s.pool.Acquire(ctx)
	if err != nil {
		return nil, fmt.Errorf("claim: %w", err)
	}
	lease := s.Fence.Get()
	stmt, args := s.sql.claim.plain, []any{s.opts.Source, limit}
	if s.sql.claim.windowed {
		args = append(args, s.window(limit))
	}
	if s.own != nil {
		args = append(args, s.own.list())
	}
	if lease != nil {
		stmt, args = s.sql.claim.fenced, append(args, lease.Shard, lease.Owner, lease.Term)
	}
	b := &batch{store: s, tx: claimTx{conn}, lease: lease}
	// Under a lease, the claim and a check of the lease after it (its
	// rows locked) go in one round trip: a takeover committed before the
	// check is seen by it, and one committed after it finds this
	// transaction holding locks on the table and ends it (EndOwner) before
	// the new holder claims anything.
	q := &pgx.Batch{}
	q.Queue("BEGIN")
	q.Queue(s.sql.claim.settings, s.idle)
	q.Queue(stmt, args...)
	if lease != nil {
		queueLeaseCheck(q, s.opts.RelaySchema, lease)
	}
	br := conn.SendBatch(ctx, q)
	fail := func(err error) (source.Batch, error) {
		_ = br.Close()
		b.tx.end(context.WithoutCancel(ctx))
		return nil, fmt.Errorf("claim from %s: %w", s.opts.Table, err)
	}
	for range 2 { // BEGIN, settings
		if _, err := br.Exec(); err != nil {
			return fail(err)
		}
	}
	rows, err := br.Query()
	if err != nil {
		return fail(err)
	}
	if s.sql.ackBatchID {
		b.id = source.NewBatchID()
	}
	for rows.Next() {
		b.rows = append(b.rows, source.Row{})
		vals, fds := rows.RawValues(), rows.FieldDescriptions()
		err := decodeRow(vals, fds, &b.rows[len(b.rows)-1])
		if err == nil {
			err = b.decodeClaim(vals, fds)
		}
		if err != nil {
			rows.Close()
			return fail(fmt.Errorf("decode: %w", err))
		}
	}
	rows.Close()
	err = rows.Err()
	if err == nil && lease != nil {
		err = leaseHeld(br, lease)
	}
	if cerr := br.Close(); err == nil {
		err = cerr
	}
	if err != nil {
		b.tx.end(context.WithoutCancel(ctx))
		return nil, fmt.Errorf("claim from %s: %w", s.opts.Table, err)
	}
	if s.opts.Bucket.Split() && s.own != nil {
		s.bucketWindow.Claimed(limit, len(b.rows))
	}
	if len(b.rows) == 0 {
		if err := b.tx.end(ctx); err != nil {
			return nil, fmt.Errorf("claim: rollback: %w", err)
		}
		return nil, nil
	}
	s.held.Add(1)
	if s.own != nil {
		s.own.add(b.ctids)
	}
	return b, nil
}

// claimTx is a claim's open transaction, on a connection of its own until
// it commits or rolls back.
type claimTx struct{ conn *pgxpool.Conn }

// end rolls back what is still open and gives the connection back to the
// pool (which closes it when it is not idle, after a failed rollback).
func (t claimTx) end(ctx context.Context) error {
	defer t.conn.Release()
	if t.conn.Conn().PgConn().TxStatus() == 'I' {
		return nil
	}
	_, err := t.conn.Exec(ctx, "ROLLBACK")
	return err
}

// window is how many rows a windowed claim of limit considers (the window
// of a bucket's claim, see source.BucketWindow).
func (s *Store) window(limit int) int {
	if s.opts.Priority != nil {
		// The window leaves the store's rows in flight out.
		return s.opts.Priority.Lookahead
	}
	if s.own != nil {
		return s.bucketWindow.Size(limit)
	}
	return source.ClaimWindow(limit, s.held.Load())
}

// MarkPublished records the rows with ids as published, those still
// pending (and forgets their retry state), in one transaction: the events
// an exactly-once takeover found in Kafka's progress record. It returns how
// many it marked.
func (s *Store) MarkPublished(ctx context.Context, ids []string) (int, error) {
	if len(ids) == 0 {
		return 0, nil
	}
	var n int64
	err := pgx.BeginFunc(ctx, s.pool, func(tx pgx.Tx) error {
		args := []any{ids}
		if s.sql.ackBatchID {
			args = append(args, source.NewBatchID())
		}
		tag, err := tx.Exec(ctx, s.sql.markByID, args...)
		if err != nil {
			return err
		}
		n = tag.RowsAffected()
		_, err = tx.Exec(ctx, s.sql.clearRetry, s.opts.Source, ids)
		return err
	})
	if err != nil {
		return 0, fmt.Errorf("mark delivered events on %s: %w", s.opts.Table, err)
	}
	return int(n), nil
}

// RecordStats implements source.Store: the backlog, the dead letters and
// the relay_state upsert are one statement, so that an idle source costs
// one query per stats interval for them.
func (s *Store) RecordStats(ctx context.Context, st source.Stats) (source.Gauges, error) {
	return RecordStats(ctx, s.pool, s.sql.stats, s.opts.Source, s.opts.Table, st)
}

// RecordStats runs stmt (see StatsStatement) for source name on table.
func RecordStats(ctx context.Context, pool *pgxpool.Pool, stmt, name string, t Table, st source.Stats) (source.Gauges, error) {
	var (
		g      source.Gauges
		oldest *time.Time
	)
	live := cmp.Or(st.Live, &source.Live{})
	var lastClaim *time.Time
	if !live.LastClaim.IsZero() {
		lastClaim = &live.LastClaim
	}
	sinks, err := json.Marshal(live.Sinks)
	if err != nil {
		return g, fmt.Errorf("record relay state: %w", err)
	}
	if live.Sinks == nil {
		sinks = []byte("{}")
	}
	err = pool.QueryRow(ctx, stmt, name, t.Schema, t.Name, st.LastPublishedID,
		st.Published, st.Retried, st.DeadLettered, live.Owner, lastClaim, live.Rate, string(sinks)).Scan(&g.Backlog.Pending, &oldest, &g.DeadLetters)
	if err != nil {
		return g, fmt.Errorf("record relay state: %w", err)
	}
	if oldest != nil {
		g.Backlog.OldestAge = max(time.Since(*oldest), 0)
	}
	return g, nil
}

// batch is a claim held by an open transaction.
type batch struct {
	store *Store
	tx    claimTx
	id    string // a uuid, recorded on acknowledged rows when the layout keeps claims
	rows  []source.Row
	lease *source.Lease // the lease the batch was claimed under, or nil
	ended atomic.Bool   // completed or released
	// Per row, in the order of rows: its address, for the acknowledgement;
	// its place in its transaction, kept when it backs off; whether it has
	// a retry state, removed when it leaves the pending set.
	ctids    []pgtype.TID
	ties     []int64
	retrying []bool
}

// decodeClaim appends what the batch keeps of a claimed row besides the row.
func (b *batch) decodeClaim(vals [][]byte, fds []pgconn.FieldDescription) error {
	tid, err := decodeTID(vals[colCtid], fds[colCtid].Format)
	if err != nil {
		return err
	}
	tie, err := decodeInt8(vals[colTie], fds[colTie].Format)
	if err != nil {
		return fmt.Errorf("tie: %w", err)
	}
	retrying, err := decodeBool(vals[colRetrying], fds[colRetrying].Format)
	if err != nil {
		return fmt.Errorf("retrying: %w", err)
	}
	b.ctids, b.ties, b.retrying = append(b.ctids, tid), append(b.ties, tie), append(b.retrying, retrying)
	return nil
}

func (b *batch) Rows() []source.Row { return b.rows }

// end takes the batch off the store's count of batches held, once: false
// when it was already taken off.
func (b *batch) end() bool {
	if !b.ended.CompareAndSwap(false, true) {
		return false
	}
	b.store.held.Add(-1)
	return true
}

// forget takes the batch's rows off the store's own rows, once its
// transaction has ended: until then they are locked, and a claim of a
// bucket must not take them for another claimer's.
func (b *batch) forget() {
	if b.store.own != nil {
		b.store.own.remove(b.ctids)
	}
}

func (b *batch) Release(ctx context.Context) error {
	if !b.end() {
		return nil
	}
	err := b.tx.end(ctx)
	b.forget()
	if err != nil {
		return fmt.Errorf("release claim: %w", err)
	}
	return nil
}

// Complete implements source.Batch: the lease check (when leased), the
// writes and COMMIT are one round trip. A lost lease fails its check with an
// error, which skips the writes and the COMMIT behind it: nothing commits.
func (b *batch) Complete(ctx context.Context, o source.Outcome) error {
	if !b.end() {
		return fmt.Errorf("complete batch on %s: %w", b.store.opts.Table, errBatchEnded)
	}
	defer b.forget() // after the transaction has ended (deferred calls run last first)
	defer b.tx.end(context.WithoutCancel(ctx))
	w := b.completion()
	c := source.PlanCompletion(b.rows, o, func(i int) bool { return b.retrying[i] })
	if err := source.WriteCompletion(ctx, w, c, b.lease != nil); err != nil {
		return fmt.Errorf("complete batch on %s: %w", b.store.opts.Table, err)
	}
	w.q.Queue("COMMIT")
	br := b.tx.conn.SendBatch(ctx, &w.q)
	err := error(nil)
	if b.lease != nil {
		err = leaseHeld(br, b.lease)
	}
	if cerr := br.Close(); err == nil {
		err = cerr
	}
	if err != nil {
		return fmt.Errorf("complete batch on %s: %w", b.store.opts.Table, err)
	}
	return nil
}

// errBatchEnded is the error of a batch completed after it was completed
// or released.
var errBatchEnded = errors.New("the batch was already completed or released")

// completion queues a batch's completion statements
// (source.CompletionWriter): the relay's tables' (relayWrites), and the
// table's own.
type completion struct {
	relayWrites
	b *batch
}

func (b *batch) completion() *completion {
	s := b.store
	return &completion{b: b, relayWrites: relayWrites{relaySQL: s.sql.relaySQL, relaySchema: s.opts.RelaySchema, lease: b.lease,
		source: s.opts.Source, table: s.opts.Table, rows: b.rows, ties: b.ties}}
}

func (w *completion) Acknowledge(_ context.Context, rows []int) error {
	s := w.b.store
	tids := make([]pgtype.TID, len(rows))
	for i, idx := range rows {
		tids[i] = w.b.ctids[idx]
	}
	if s.sql.ackBatchID {
		w.q.Queue(s.sql.ack, tids, w.b.id)
	} else {
		w.q.Queue(s.sql.ack, tids)
	}
	return nil
}

func (w *completion) RecordRetries(_ context.Context, rs []source.Retry) error {
	w.retriesInTable(w.b.store.sql.retryRow, rs)
	return nil
}

func (w *completion) DeadLetter(_ context.Context, ds []source.DeadLetter) error {
	s := w.b.store
	w.deadInTable(s.sql.dead, s.opts.Layout.Mode == "delete", ds)
	return nil
}

// queueLeaseCheck queues the read of lease l in relaySchema; leaseHeld
// reads its answer. The read takes no lock: a lock on the lease row would
// hold up the owner's own renewals. When the lease is no longer held the
// check fails with an error (a division by the number of matching leases,
// zero), so that the statements queued behind it in the same round trip,
// COMMIT included, are skipped. Queued behind the statements it must follow
// or ahead of those it guards, it costs no round trip of its own.
func queueLeaseCheck(q *pgx.Batch, relaySchema string, l *source.Lease) {
	q.Queue(`SELECT 1 / count(*) FROM `+QuoteIdent(relaySchema)+`.leases
WHERE shard = $1 AND owner = $2 AND term = $3`, l.Shard, l.Owner, l.Term)
}

// leaseHeld reads the answer of a queued check of lease l:
// source.ErrLeaseLost when the lease changed owner or term.
func leaseHeld(br pgx.BatchResults, l *source.Lease) error {
	var one int64
	err := br.QueryRow().Scan(&one)
	if pgErr := (*pgconn.PgError)(nil); errors.As(err, &pgErr) && pgErr.Code == "22012" {
		return fmt.Errorf("%w (term %d of %s)", source.ErrLeaseLost, l.Term, l.Shard)
	}
	if err != nil {
		return fmt.Errorf("check lease: %w", err)
	}
	return nil
}
