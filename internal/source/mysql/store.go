package mysql

import (
	"cmp"
	"context"
	"database/sql"
	"encoding/json"
	"errors"
	"fmt"
	"slices"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"github.com/outbox-relay/outbox-relay/internal/layout"
	"github.com/outbox-relay/outbox-relay/internal/source"
)

// DefaultRelayDatabase is where the relay keeps its own tables unless told
// otherwise, like PostgreSQL's relay schema.
const DefaultRelayDatabase = "outbox_relay"

// Options configure one source's store.
type Options struct {
	Source        string // the source's name
	Table         Table
	RelayDatabase string // default DefaultRelayDatabase
	Layout        *layout.Layout
	Ordering      bool
	// ClaimTimeout is the source's claim timeout (sources[].claim_timeout).
	// A row another relay marked claimed (state.batch_id) and did not
	// deliver is pending again once its claim is older than this. It is
	// also how long this store's claims may stay idle before the server
	// ends them: when it differs from the pool's wait_timeout (see
	// ConnOptions.ClaimTimeout), each claim sets its connection's
	// wait_timeout to it and puts the pool's back afterwards, so the
	// store's value wins. Zero takes the pool's wait_timeout for a pool
	// made by Open, else DefaultClaimTimeout.
	ClaimTimeout time.Duration
	// ClaimIndex is the index every claim reads the table by (see
	// ClaimIndex); empty leaves the choice to the planner, which is only
	// safe while a single claim runs at a time.
	ClaimIndex string
	// PendingIndex, when set, is the index a claim's window reads the
	// pending rows by (see PendingIndex); empty reads it by ClaimIndex.
	PendingIndex string
	// Bucket is the part of the source the store claims (see
	// source.Bucket); the zero value is the whole source.
	Bucket source.Bucket
	// Priority, when set, has the claims take some rows first (see
	// source.Priority); not with a bucket of a source, with ordering.
	Priority *source.Priority
}

// Validate checks every identifier the store will put in SQL; the error
// names the field. A layout's column names come from the catalogue, but a
// name MySQL accepts (a backtick, 65 characters) is still refused here.
func (o Options) Validate() error {
	if err := o.Table.Validate(); err != nil {
		return err
	}
	if err := o.Bucket.Validate(); err != nil {
		return err
	}
	if err := ValidateIdent("relay_database", o.relayDB()); err != nil {
		return err
	}
	if o.ClaimIndex != "" {
		if err := ValidateIdent("claim index", o.ClaimIndex); err != nil {
			return err
		}
	}
	if o.PendingIndex != "" {
		if err := ValidateIdent("pending index", o.PendingIndex); err != nil {
			return err
		}
	}
	l := o.Layout
	if l == nil {
		return errors.New("layout: not resolved")
	}
	if l.XID != "" {
		return &IdentError{"layout.xid_column", l.XID, "is not supported on MySQL (PostgreSQL only)"}
	}
	cols := []struct{ field, name string }{
		{"layout.id", l.ID.Name}, {"layout.payload", l.Payload.Name},
	}
	opt := []struct{ field, name string }{
		{"layout.headers", l.Headers}, {"layout.event_type", l.EventType}, {"layout.aggregate_type", l.AggregateType},
		{"layout.aggregate_id", l.AggregateID}, {"layout.created_at", l.CreatedAt}, {"layout.order_by", l.OrderBy},
		{"layout.retry_count", l.RetryCount}, {"layout.max_retries", l.MaxRetries}, {"layout.error", l.Error},
		{"layout.state.flag", l.Flag}, {"layout.state.published_at", l.PublishedAt}, {"layout.state.status", l.Status},
		{"layout.state.errored", l.Errored.Name},
	}
	if o.Priority != nil {
		opt = append(opt, struct{ field, name string }{"event_priority.column", o.Priority.Column})
	}
	for _, c := range opt {
		if c.name != "" {
			cols = append(cols, c)
		}
	}
	for field, t := range map[string][]string{"layout.topic": l.Topic.Columns(), "layout.key": l.Key.Columns(), "layout.partition_key": l.PartitionKey.Columns()} {
		for _, c := range t {
			cols = append(cols, struct{ field, name string }{field, c})
		}
	}
	for _, t := range append(slices.Clone(l.OrderKeys), l.Extra...) {
		for _, c := range t.Columns() {
			cols = append(cols, struct{ field, name string }{"layout.order_key", c})
		}
	}
	for _, c := range cols {
		if err := ValidateIdent(c.field, c.name); err != nil {
			return err
		}
	}
	return nil
}

func (o Options) relayDB() string {
	if o.RelayDatabase == "" {
		return DefaultRelayDatabase
	}
	return o.RelayDatabase
}

// Store is the MySQL/MariaDB store of one source.
type Store struct {
	db      *sql.DB
	opts    Options
	sql     statements
	invalid error // from Options.Validate: every call returns it
	opened  bool  // db came from Open: its sessions are set up already
	id      idKind
	// waitSet and waitReset, when set, are run on a claim's connection
	// before and after it: the store's claim timeout differs from the
	// connection's wait_timeout.
	waitSet, waitReset string

	mu      sync.Mutex
	columns []tableColumn // the table's columns, looked up on first need

	// held counts the batches claimed and not yet completed or released:
	// their rows are locked, and the next claim's window reaches past them.
	held atomic.Int64
	// inFlight are the ids of those batches' rows, for a claim that reads
	// a window: it passes over them rather than try to lock them.
	flightMu sync.Mutex
	inFlight map[string]bool
	// bucketWindow sizes the window of a bucket's claims.
	bucketWindow source.BucketWindow

	// Fence binds claims to the lease they are made under; a batch
	// completes only while that lease is still held (see source.Fence).
	Fence source.Fence
}

// New builds the store of one source; the layout must be resolved against
// the table (see Columns). New does not fail: options that do not validate
// make every call return the error (call Options.Validate to fail early).
func New(db *sql.DB, opts Options) *Store {
	opts.RelayDatabase = opts.relayDB()
	poolWait, opened := poolWaitTimeout(db)
	s := &Store{db: db, opened: opened}
	switch {
	case opts.ClaimTimeout > 0:
	case opened:
		opts.ClaimTimeout = time.Duration(poolWait) * time.Second
	default:
		opts.ClaimTimeout = DefaultClaimTimeout
	}
	if w := waitSeconds(opts.ClaimTimeout); !opened || w != poolWait {
		s.waitSet = "SET SESSION wait_timeout = " + strconv.Itoa(w)
		s.waitReset = "SET SESSION wait_timeout = DEFAULT"
		if opened {
			s.waitReset = "SET SESSION wait_timeout = " + strconv.Itoa(poolWait)
		}
	}
	s.opts = opts
	if s.invalid = opts.Validate(); s.invalid == nil {
		s.sql = buildStatements(opts.Layout, opts.Table.String(), opts.RelayDatabase, opts.Ordering, opts.ClaimTimeout, opts.ClaimIndex, opts.PendingIndex, opts.Bucket, opts.Priority)
		s.id = kindOf(opts.Layout.ID)
	}
	return s
}

// ClaimTimeout is the store's claim timeout, defaults applied.
func (s *Store) ClaimTimeout() time.Duration { return s.opts.ClaimTimeout }

// Claim implements source.Store: the claim is a transaction on one
// connection that stays open until Complete or Release.
func (s *Store) Claim(ctx context.Context, limit int) (source.Batch, error) {
	if s.invalid != nil {
		return nil, s.invalid
	}
	var opts *sql.TxOptions
	if !s.opened {
		// A pool not made by Open may default to REPEATABLE READ, whose gap
		// locks would block the application's inserts while a batch is held.
		opts = &sql.TxOptions{Isolation: sql.LevelReadCommitted}
	}
	b := &batch{store: s, lease: s.Fence.Get()}
	var err error
	// database/sql rolls a transaction back when the context it began with
	// ends. The claim's context ends when the relay stops claiming, while
	// the batch still has its shutdown grace to be published and completed:
	// the transaction lives until Complete or Release, not with ctx.
	txCtx := context.WithoutCancel(ctx)
	if s.waitSet != "" {
		if b.conn, err = s.db.Conn(ctx); err != nil {
			return nil, fmt.Errorf("claim: connection: %w", err)
		}
		if _, err = b.conn.ExecContext(ctx, s.waitSet); err != nil {
			_ = b.conn.Close()
			return nil, fmt.Errorf("claim: set the claim timeout: %w", err)
		}
		b.tx, err = b.conn.BeginTx(txCtx, opts)
	} else {
		b.tx, err = s.db.BeginTx(txCtx, opts)
	}
	if err != nil {
		b.done()
		return nil, fmt.Errorf("claim: begin: %w", err)
	}
	if b.lease != nil {
		// Checked before any row is locked too: a deposed holder must not
		// hold rows even for a moment, or the new holder's claim would
		// skip them and take later rows of their keys first. A takeover
		// committed after this read finds the transaction open and ends it
		// (Leases.EndOwner) before the new holder claims.
		if err := b.checkLease(ctx, ""); err != nil {
			_ = b.tx.Rollback()
			b.done()
			return nil, fmt.Errorf("claim from %s: %w", s.opts.Table, err)
		}
	}
	if err := b.claim(ctx, limit); err != nil {
		_ = b.tx.Rollback()
		b.done()
		return nil, fmt.Errorf("claim from %s: %w", s.opts.Table, err)
	}
	if s.opts.Bucket.Split() {
		s.bucketWindow.Claimed(limit, len(b.rows))
	}
	if len(b.rows) == 0 {
		err := b.tx.Rollback()
		b.done()
		if err != nil {
			return nil, fmt.Errorf("claim: rollback: %w", err)
		}
		return nil, nil
	}
	if b.lease != nil {
		// Checked after the rows are locked: a takeover committed before
		// this read is seen here, and one committed after it finds this
		// transaction open and ends it (Leases.EndOwner) before the new
		// holder claims anything.
		if err := b.checkLease(ctx, ""); err != nil {
			_ = b.tx.Rollback()
			b.done()
			return nil, fmt.Errorf("claim from %s: %w", s.opts.Table, err)
		}
	}
	if s.sql.ackClaim {
		b.id = source.NewBatchID()
	}
	s.held.Add(1)
	s.track(b.rows, true)
	b.counted = true
	return b, nil
}

// claimArgs are the arguments of the claim without a window, in the order
// of its placeholders.
func (s *Store) claimArgs(limit int) []any {
	// The retry state's subqueries: attempts, then due.
	args := []any{s.opts.Source, s.opts.Source}
	if s.opts.Ordering {
		args = append(args, s.opts.Source)
	}
	return append(args, limit)
}

// window is how many rows a windowed claim of limit considers. The window
// of a bucket's claim leaves out the store's rows in flight (see
// source.BucketWindow).
func (s *Store) window(limit int) int {
	if s.opts.Bucket.Split() {
		return s.bucketWindow.Size(limit)
	}
	if s.opts.Priority != nil {
		return s.opts.Priority.Window(limit, s.held.Load())
	}
	return source.ClaimWindow(limit, s.held.Load())
}

// claim runs the claim in the batch's transaction and decodes its rows.
func (b *batch) claim(ctx context.Context, limit int) error {
	s := b.store
	b.rows = make([]source.Row, 0, limit)
	if s.sql.window == "" {
		return b.read(ctx, s.sql.claim, s.claimArgs(limit)...)
	}
	win, err := s.claimable(ctx, b.tx, limit)
	if err != nil {
		return fmt.Errorf("window: %w", err)
	}
	// The window's rows are locked by id, at most the rows still wanted at
	// a time (a locking read locks every row it reads, and these are read
	// by the primary key, then sorted): rows another claim holds are
	// skipped, and the next ids are tried until the batch is full or the
	// window is spent. A bucket's claim, with ordering, holds the key of
	// each row it could not lock (see passedKeys).
	var passed passedKeys
	for len(win) > 0 && len(b.rows) < limit {
		n := min(limit-len(b.rows), len(win))
		chunk := win[:n]
		from := len(b.rows)
		if err := b.claimIDs(ctx, windowIDs(chunk)); err != nil {
			return err
		}
		win = win[n:]
		if s.opts.Bucket.Split() && s.opts.Ordering {
			b.rows = append(b.rows[:from], passed.keep(chunk, b.rows[from:])...)
			win = passed.drop(win)
		}
	}
	return nil
}

// claimIDs locks and reads the claimable rows among ids.
func (b *batch) claimIDs(ctx context.Context, ids []string) error {
	q, args, err := b.claimIDsSQL(ids)
	if err != nil {
		return err
	}
	return b.read(ctx, q, args...)
}

// claimIDsSQL is the locking read of the rows with ids, and its arguments.
func (b *batch) claimIDsSQL(ids []string) (string, []any, error) {
	s := b.store
	args := []any{s.opts.Source}
	for _, id := range ids {
		v, err := s.idArg(id)
		if err != nil {
			return "", nil, fmt.Errorf("id %q: %w", id, err)
		}
		args = append(args, v)
	}
	args = append(args, s.opts.Source)
	if s.opts.Ordering {
		args = append(args, s.opts.Source)
	}
	return strings.Replace(s.sql.claimIDs, idsMarker, placeholders(len(ids), s.idWrap()), 1), args, nil
}

// read runs a claim's locking read and appends its rows to the batch.
func (b *batch) read(ctx context.Context, q string, args ...any) error {
	rows, err := b.tx.QueryContext(ctx, q, args...)
	if err != nil {
		return err
	}
	defer rows.Close()
	for rows.Next() {
		b.rows = append(b.rows, source.Row{})
		if err := scanRow(rows, len(b.store.opts.Layout.Extra), &b.rows[len(b.rows)-1], &b.claimedAt); err != nil {
			return fmt.Errorf("decode: %w", err)
		}
	}
	return rows.Err()
}

// claimable reads the claim's window and returns the rows a claim may take,
// in the claim's order: the window's rows but those this store's batches
// in flight hold (their keys are the order book's to hold) and, with
// ordering, those after a row of their key another relay claimed within
// the claim timeout (the relay that claimed it is alive, and the row is
// delivered or its claim expires before the rows after it may go; once it
// expires it is claimed here, first). Every row before a claimable row is
// in the window, so the window decides.
func (s *Store) claimable(ctx context.Context, tx *sql.Tx, limit int) ([]windowRow, error) {
	win, err := s.windowRows(ctx, tx, s.window(limit), true)
	if err != nil {
		return nil, err
	}
	var (
		ids     []windowRow
		foreign map[string]bool // keys a row another relay claimed holds
	)
	s.flightMu.Lock()
	defer s.flightMu.Unlock()
	for _, r := range win {
		switch {
		case r.claimed:
			if r.key != "" {
				if foreign == nil {
					foreign = map[string]bool{}
				}
				foreign[r.key] = true
			}
		case r.key != "" && foreign[r.key]:
		case s.inFlight[r.id]:
		default:
			ids = append(ids, r)
		}
	}
	return ids, nil
}

// windowRow is a row of a claim's window: its id as text, its order key,
// and whether another relay holds it claimed.
type windowRow struct {
	id, key string
	claimed bool
}

// windowArgs are the window statement's arguments for a window of n rows,
// after those of own.
func (s *Store) windowArgs(n int, own []any) []any {
	args := append(own, s.opts.Source)
	if s.opts.Ordering {
		args = append(args, s.opts.Source)
	}
	return append(args, n)
}

// windowRows reads the first n rows of the claim's window, in its order;
// a bucket's window without the store's rows in flight when passOwn.
func (s *Store) windowRows(ctx context.Context, tx *sql.Tx, n int, passOwn bool) ([]windowRow, error) {
	q := s.sql.window
	var own []any
	if s.opts.Bucket.Split() {
		if passOwn {
			var err error
			if own, err = s.ownIDs(); err != nil {
				return nil, err
			}
		}
		not := ""
		if len(own) > 0 {
			not = "\n  AND " + sq.Col("f", s.opts.Layout.ID.Name) + " NOT IN (" + placeholders(len(own), s.idWrap()) + ")"
		}
		q = strings.Replace(q, ownMarker, not, 1)
	}
	rows, err := tx.QueryContext(ctx, q, s.windowArgs(n, own)...)
	if err != nil {
		return nil, err
	}
	defer rows.Close()
	var out []windowRow
	for rows.Next() {
		var r windowRow
		if err := rows.Scan(&r.id, &r.key, &r.claimed); err != nil {
			return nil, err
		}
		out = append(out, r)
	}
	return out, rows.Err()
}

// ownIDs are the ids of the rows of the store's batches in flight, as
// arguments.
func (s *Store) ownIDs() ([]any, error) {
	s.flightMu.Lock()
	defer s.flightMu.Unlock()
	ids := make([]any, 0, len(s.inFlight))
	for id := range s.inFlight {
		v, err := s.idArg(id)
		if err != nil {
			return nil, fmt.Errorf("id %q: %w", id, err)
		}
		ids = append(ids, v)
	}
	return ids, nil
}

// track adds the rows of a claimed batch to those in flight (add) or takes
// them off.
func (s *Store) track(rows []source.Row, add bool) {
	if s.sql.window == "" {
		return
	}
	s.flightMu.Lock()
	defer s.flightMu.Unlock()
	if s.inFlight == nil {
		s.inFlight = map[string]bool{}
	}
	for i := range rows {
		if add {
			s.inFlight[rows[i].ID] = true
		} else {
			delete(s.inFlight, rows[i].ID)
		}
	}
}

// RecordStats implements source.Store: one statement reads the backlog and
// the open dead letters, a second adds the counters to relay_state.
func (s *Store) RecordStats(ctx context.Context, st source.Stats) (source.Gauges, error) {
	var g source.Gauges
	if s.invalid != nil {
		return g, s.invalid
	}
	var age sql.NullInt64
	if err := s.db.QueryRowContext(ctx, s.sql.gauges, s.opts.Source).Scan(&g.Backlog.Pending, &age, &g.DeadLetters); err != nil {
		return g, fmt.Errorf("read backlog of %s: %w", s.opts.Table, err)
	}
	if age.Valid {
		g.Backlog.OldestAge = max(time.Duration(age.Int64)*time.Microsecond, 0)
	}
	schema := s.opts.Table.Schema
	if schema == "" {
		if err := s.db.QueryRowContext(ctx, "SELECT COALESCE(DATABASE(), '')").Scan(&schema); err != nil {
			return g, fmt.Errorf("record relay state: %w", err)
		}
	}
	live := cmp.Or(st.Live, &source.Live{})
	var lastClaim any
	if !live.LastClaim.IsZero() {
		lastClaim = live.LastClaim.UTC()
	}
	sinks, err := json.Marshal(live.Sinks)
	if err != nil {
		return g, fmt.Errorf("record relay state: %w", err)
	}
	if live.Sinks == nil {
		sinks = []byte("{}")
	}
	_, err = s.db.ExecContext(ctx, s.sql.stats, s.opts.Source, schema, s.opts.Table.Name, lastClaim, st.LastPublishedID,
		st.Published, st.Retried, st.DeadLettered, g.Backlog.Pending, g.Backlog.OldestAge.Seconds(),
		live.Owner, lastClaim, live.Rate, string(sinks))
	if err != nil {
		return g, fmt.Errorf("record relay state: %w", err)
	}
	return g, nil
}

// idArg converts an event id back to the id column's Go type, so that
// integer ids compare as integers (a quoted bigint would compare as a
// double and lose precision).
func (s *Store) idArg(id string) (any, error) {
	switch s.id {
	case idSigned:
		return strconv.ParseInt(id, 10, 64)
	case idUnsigned:
		return strconv.ParseUint(id, 10, 64)
	}
	return id, nil
}

// idWrap is how an id placeholder is written for the id column.
func (s *Store) idWrap() string {
	if s.id == idBinary {
		return "UNHEX(%s)"
	}
	return ""
}

// cutOrderKey bounds an order key to retry_state.order_key's length in
// characters, as the claim's comparison does.
func cutOrderKey(k string) string {
	n := 0
	for i := range k {
		if n == maxOrderKeyLen {
			return k[:i]
		}
		n++
	}
	return k
}
