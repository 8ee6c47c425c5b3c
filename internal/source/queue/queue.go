// Package queue is the store of a source in state mode queue on PostgreSQL
// (seed 003's payment dispatch): a hot table of pending dispatches claimed
// by deleting them, an append-only archive of attempts, and a sequence per
// participant that dispatch follows strictly.
//
// A claim deletes due rows from the hot table and appends a DISPATCHING
// attempt for each, in one short statement committed before the dispatch.
// It takes a participant's row only when it is the participant's earliest,
// at most one past its last settled (DISPATCHED or FAILED) sequence number,
// and no attempt of the participant is in flight: one dispatch per
// participant at a time, in sequence order, and a retry, a zombie or a gap
// holds that participant only. Outcomes are appended, at most one per
// attempt: DISPATCHED; RETRYABLE with the row put back (same id and
// sequence, attempt count = the attempt's number, due after the backoff);
// FAILED, the dead letter (also listed in the relay's failed_events, from
// where a replay puts the row back).
package queue

import (
	"context"
	"errors"
	"fmt"
	"io/fs"
	"strconv"
	"strings"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgxpool"
	"github.com/jackc/pgx/v5/stdlib"
	"github.com/pressly/goose/v3"
	"github.com/pressly/goose/v3/lock"

	"github.com/outbox-relay/outbox-relay/internal/layout"
	"github.com/outbox-relay/outbox-relay/internal/metrics"
	"github.com/outbox-relay/outbox-relay/internal/source"
	"github.com/outbox-relay/outbox-relay/internal/source/postgres"
	"github.com/outbox-relay/outbox-relay/migrations/queue"
)

// Migrate creates (and upgrades) the queue's tables, functions and trigger
// in schema of the database at dsn. Its version table sits beside them
// (payment_outbox_goose_version).
func Migrate(ctx context.Context, dsn, schema string) error {
	cfg, err := pgx.ParseConfig(dsn)
	if err != nil {
		return fmt.Errorf("queue migrate: %w", err)
	}
	cfg.RuntimeParams["search_path"] = postgres.QuoteIdent(schema)
	db := stdlib.OpenDB(*cfg)
	defer func() { _ = db.Close() }()
	if _, err := db.ExecContext(ctx, "CREATE SCHEMA IF NOT EXISTS "+postgres.QuoteIdent(schema)); err != nil {
		return fmt.Errorf("queue migrate: %w", err)
	}
	fsys, err := fs.Sub(queue.Postgres, "postgres")
	if err != nil {
		return err
	}
	locker, err := lock.NewPostgresSessionLocker(lock.WithLockID(0x6f75746271756575)) // "outbqueu"
	if err != nil {
		return err
	}
	prov, err := goose.NewProvider(goose.DialectPostgres, db, fsys,
		goose.WithTableName(schema+".payment_outbox_goose_version"),
		goose.WithSessionLocker(locker),
		goose.WithDisableGlobalRegistry(true))
	if err != nil {
		return fmt.Errorf("queue migrate: %w", err)
	}
	if _, err := prov.Up(ctx); err != nil {
		return fmt.Errorf("queue migrate: %w", err)
	}
	return nil
}

// Options configure the store of one queue.
type Options struct {
	Source      string
	Table       postgres.Table // the hot table
	RelaySchema string
	Layout      *layout.Layout // resolved, mode queue
	// Metrics, when set, count the attempts appended and the dispatches'
	// latency.
	Metrics *metrics.QueueMetrics
}

// Store claims and records dispatches of one queue. It implements
// source.Store.
type Store struct {
	pool  *pgxpool.Pool
	opts  Options
	n     *names
	sql   statements
	Fence source.Fence
}

// LeaseFence implements lease.Fenced.
func (s *Store) LeaseFence() *source.Fence { return &s.Fence }

// ErrNoOutcomeIndex says the archive lacks the unique index that keeps an
// attempt to one outcome.
var ErrNoOutcomeIndex = errors.New("the archive has no unique index keeping one outcome per attempt")

// New checks the archive table and returns the queue's store.
func New(ctx context.Context, pool *pgxpool.Pool, opts Options) (*Store, error) {
	l := opts.Layout
	if l == nil || l.Queue == nil {
		return nil, errors.New("queue store: the layout is not in state mode queue")
	}
	archive, err := archiveTable(opts.Table, l.Queue.Archive)
	if err != nil {
		return nil, err
	}
	hotCols, err := postgres.Columns(ctx, pool, opts.Table)
	if err != nil {
		return nil, err
	}
	archCols, err := postgres.Columns(ctx, pool, archive)
	if err != nil {
		return nil, fmt.Errorf("state.queue.attempts: %w", err)
	}
	n, err := newNames(opts.Table, archive, l, hotCols, archCols)
	if err != nil {
		return nil, err
	}
	var ok bool
	err = pool.QueryRow(ctx, `SELECT EXISTS (SELECT 1 FROM pg_index i
WHERE i.indrelid = $1::regclass AND i.indisunique AND i.indpred IS NOT NULL
  AND (SELECT array_agg(a.attname::text ORDER BY a.attname) FROM pg_attribute a
       WHERE a.attrelid = i.indrelid AND a.attnum = ANY(i.indkey)) = (SELECT array_agg(c ORDER BY c) FROM unnest($2::text[]) c))`,
		archive.String(), []string{l.ID.Name, l.Queue.Archive.AttemptNo}).Scan(&ok)
	if err != nil {
		return nil, fmt.Errorf("state.queue.attempts: %w", err)
	}
	if !ok {
		return nil, fmt.Errorf("state.queue.attempts: %w; create it: CREATE UNIQUE INDEX ON %s (%s, %s) WHERE %s <> %s",
			ErrNoOutcomeIndex, archive, n.id, n.attemptNo, n.status, n.dispatching)
	}
	return &Store{pool: pool, opts: opts, n: n, sql: buildStatements(n, l, opts.RelaySchema)}, nil
}

// TakesReceipts implements source.ReceiptTaker: the archive records what
// the destination answered.
func (s *Store) TakesReceipts() bool { return true }

// Claim implements source.Store: the rows it returns are already deleted
// from the hot table, each with its DISPATCHING attempt, committed.
func (s *Store) Claim(ctx context.Context, limit int) (source.Batch, error) {
	lease := s.Fence.Get()
	var (
		rows pgx.Rows
		err  error
	)
	if lease != nil {
		rows, err = s.pool.Query(ctx, s.sql.claimFenced, limit, lease.Shard, lease.Owner, lease.Term)
	} else {
		rows, err = s.pool.Query(ctx, s.sql.claim, limit)
	}
	if err != nil {
		return nil, fmt.Errorf("claim from %s: %w", s.opts.Table, err)
	}
	defer rows.Close()
	b := &batch{store: s}
	extras := len(s.opts.Layout.Extra)
	for rows.Next() {
		vals, fds := rows.RawValues(), rows.FieldDescriptions()
		b.rows = append(b.rows, source.Row{})
		if err := postgres.DecodeRow(vals, fds, &b.rows[len(b.rows)-1], extras); err != nil {
			return nil, fmt.Errorf("claim from %s: decode: %w", s.opts.Table, err)
		}
		no, err := strconv.ParseInt(string(vals[len(vals)-1]), 10, 32)
		if err != nil {
			return nil, fmt.Errorf("claim from %s: attempt number: %w", s.opts.Table, err)
		}
		b.attempt = append(b.attempt, int32(no))
	}
	if err := rows.Err(); err != nil {
		return nil, fmt.Errorf("claim from %s: %w", s.opts.Table, err)
	}
	if len(b.rows) == 0 {
		return nil, nil
	}
	if m := s.opts.Metrics; m != nil {
		m.Attempts(s.opts.Layout.Queue.Archive.States.Dispatching).Add(float64(len(b.rows)))
	}
	return b, nil
}

// batch is a set of dispatches whose DISPATCHING attempts are committed.
type batch struct {
	store   *Store
	rows    []source.Row
	attempt []int32 // each row's attempt number
}

func (b *batch) Rows() []source.Row { return b.rows }

// released is the error code of an attempt given back unsent.
const released = "RELEASED"

// Release records nothing: the relay gives a batch back only when its
// shutdown deadline passed with the dispatch under way, and whether the
// destination got it is unknown. The attempts stay DISPATCHING; the reaper
// puts the rows back after its timeout, and their dispatch again carries
// the same id for the destination to recognise.
func (b *batch) Release(context.Context) error { return nil }

// Complete implements source.Batch: the outcome of every attempt in one
// statement. It is not fenced by the lease: the dispatches happened, and
// their outcomes are the truth whoever holds the lease now. A row in none
// of the lists was not sent; it is given back as a RETRYABLE attempt.
func (b *batch) Complete(ctx context.Context, o source.Outcome) error {
	s, n := b.store, len(b.rows)
	ids, nos, states := make([]string, n), make([]int32, n), make([]string, n)
	refs, codes, ecodes, emsgs := make([]string, n), make([]string, n), make([]string, n), make([]string, n)
	lat, due, created := make([]*int32, n), make([]time.Time, n), make([]*time.Time, n)
	types, topics, keys := make([]*string, n), make([]*string, n), make([]*string, n)
	payloads, isJSON := make([][]byte, n), make([]bool, n)
	st := s.opts.Layout.Queue.Archive.States
	now := time.Now()
	for i := range b.rows {
		r := &b.rows[i]
		ids[i], nos[i], states[i], due[i] = r.ID, b.attempt[i], st.Retryable, now
		ecodes[i], emsgs[i] = released, "released unsent"
		if !r.CreatedAt.IsZero() {
			created[i] = &r.CreatedAt
		}
		if i < len(o.Receipts) {
			rc := o.Receipts[i]
			refs[i], codes[i] = rc.Reference, rc.Code
			if rc.Latency > 0 {
				ms := int32(min(rc.Latency.Milliseconds(), 1<<31-1))
				lat[i] = &ms
			}
		}
	}
	for _, i := range o.Published {
		states[i], ecodes[i], emsgs[i] = st.Dispatched, "", ""
	}
	for _, r := range o.Retry {
		states[r.Index], due[r.Index], ecodes[r.Index], emsgs[r.Index] = st.Retryable, r.At, errorCode(codes[r.Index], "RETRYABLE"), truncate(r.Err)
	}
	for _, d := range o.Dead {
		i, r := d.Index, &b.rows[d.Index]
		code := "TERMINAL"
		if d.Exhausted {
			code = "EXHAUSTED"
		}
		states[i], ecodes[i], emsgs[i] = st.Failed, errorCode(codes[i], code), truncate(d.Reason)
		types[i], payloads[i], isJSON[i] = &r.EventType, r.Payload, d.PayloadIsJSON
		if r.TopicOK {
			topics[i] = &r.Topic
		}
		if r.Key != nil {
			k := string(r.Key)
			keys[i] = &k
		}
	}
	rows, err := s.pool.Query(ctx, s.sql.outcome, s.opts.Source, s.opts.Table.Schema, s.opts.Table.Name,
		ids, nos, states, refs, codes, ecodes, emsgs, lat, due, created, types, topics, keys, payloads, isJSON)
	if err != nil {
		return fmt.Errorf("record outcomes on %s: %w", s.opts.Table, err)
	}
	got := map[string]bool{}
	var state, id string
	_, err = pgx.ForEachRow(rows, []any{&id, &state}, func() error {
		got[id] = true
		if m := s.opts.Metrics; m != nil {
			m.Attempts(state).Inc()
		}
		return nil
	})
	if err != nil {
		return fmt.Errorf("record outcomes on %s: %w", s.opts.Table, err)
	}
	if m := s.opts.Metrics; m != nil {
		for _, r := range o.Receipts {
			if r.Latency > 0 {
				m.DispatchLatency.Observe(r.Latency.Seconds())
			}
		}
	}
	if len(got) == n {
		return nil
	}
	var late []string
	for i, id := range ids {
		if !got[id] {
			late = append(late, fmt.Sprintf("%s attempt %d (%s)", id, nos[i], states[i]))
		}
	}
	return fmt.Errorf("record outcomes on %s: %w: %s", s.opts.Table, ErrSettled, strings.Join(late, ", "))
}

// ErrSettled says an attempt already had an outcome (the reaper took it as
// a zombie): the outcome found by this relay was not recorded.
var ErrSettled = source.ErrAlreadySettled

// errorCode is the destination's code when it gave one, else fallback.
func errorCode(code, fallback string) string {
	if code != "" {
		return code
	}
	return fallback
}

// truncate bounds a stored error message.
func truncate(s string) string {
	const maxLen = 2000
	if len(s) <= maxLen {
		return s
	}
	return s[:maxLen] + "..."
}
