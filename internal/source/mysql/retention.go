package mysql

import (
	"context"
	"database/sql"
	"database/sql/driver"
	"errors"
	"fmt"
	"math"
	"slices"
	"strconv"
	"time"

	gomysql "github.com/go-sql-driver/mysql"

	"github.com/outbox-relay/outbox-relay/internal/layout"
	"github.com/outbox-relay/outbox-relay/internal/source"
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

// PurgeParams say which rows Purge deletes and how fast.
type PurgeParams struct {
	Source        string // the source's name, as retry_state knows it
	Table         Table
	RelayDatabase string // default DefaultRelayDatabase
	Layout        *layout.Layout
	// OlderThan is the age a settled row must have, by its published-at
	// column, else its created-at column.
	OlderThan time.Duration
	// IncludeDead deletes dead-lettered rows too (failed_events keeps a
	// copy of each, and a replay restores it from there).
	IncludeDead bool
	// DryRun counts what would be deleted and deletes nothing.
	DryRun bool
	// BatchSize bounds the rows one batch deletes (default
	// DefaultPurgeBatch); each batch is its own transaction.
	BatchSize int
	// Pause is slept between batches, to leave the database to others.
	Pause time.Duration
	// LockTimeout bounds how long a batch waits for a lock, row or table
	// (innodb_lock_wait_timeout and lock_wait_timeout, in whole seconds,
	// default DefaultPurgeLockTimeout); a batch that gives up is tried
	// again after the pause. StatementTimeout bounds one batch (default
	// DefaultPurgeStmtTimeout): its connection is closed, and the server
	// rolls it back.
	LockTimeout, StatementTimeout time.Duration
}

// PurgeResult counts what Purge deleted, or with DryRun would delete.
type PurgeResult = source.PurgeResult

// Purge deletes the settled rows of one outbox table that are older than
// p.OlderThan, in batches that each lock at most p.BatchSize rows for one
// short transaction and skip rows another transaction holds: a delivered
// row (published flag, published-at timestamp or published status), and
// with p.IncludeDead a dead-lettered one. Pending rows, rows in backoff and
// rows claimed by a relay are never deleted. It also prunes the relay
// database's tables for the source: dead letters replayed before the
// cutoff with their audit rows, and retry state of events no longer in the
// table.
//
// Each batch finds its rows with a plain read, then locks them by the
// primary key (the index claims read by) with FOR UPDATE SKIP LOCKED and
// deletes them by it. db should come from Open: its sessions read in UTC
// and READ COMMITTED.
//
// On error the result counts what was deleted before it.
func Purge(ctx context.Context, db *sql.DB, p PurgeParams) (PurgeResult, error) {
	var res PurgeResult
	if p.OlderThan < 0 {
		return res, fmt.Errorf("purge %s: negative age %s", p.Table, p.OlderThan)
	}
	if p.Layout == nil {
		return res, fmt.Errorf("purge %s: layout not resolved", p.Table)
	}
	if err := p.Table.Validate(); err != nil {
		return res, fmt.Errorf("purge: %w", err)
	}
	if p.RelayDatabase == "" {
		p.RelayDatabase = DefaultRelayDatabase
	}
	if err := ValidateIdent("relay_database", p.RelayDatabase); err != nil {
		return res, fmt.Errorf("purge %s: %w", p.Table, err)
	}
	p.BatchSize = cmpOr(p.BatchSize, DefaultPurgeBatch)
	p.LockTimeout = cmpOr(p.LockTimeout, DefaultPurgeLockTimeout)
	p.StatementTimeout = cmpOr(p.StatementTimeout, DefaultPurgeStmtTimeout)
	micros := p.OlderThan.Microseconds()
	secs := strconv.Itoa(max(1, int(math.Ceil(p.LockTimeout.Seconds()))))
	r := &purger{db: db, p: p,
		setTimeouts:   "SET SESSION innodb_lock_wait_timeout = " + secs + ", lock_wait_timeout = " + secs,
		resetTimeouts: "SET SESSION innodb_lock_wait_timeout = DEFAULT, lock_wait_timeout = DEFAULT"}

	if p.Layout.Mode == "delete" {
		res.KeptByLayout = true
	} else {
		index, err := keyIndex(ctx, db, p.Table, p.Layout.ID.Name)
		if err != nil {
			return res, fmt.Errorf("purge %s: %w", p.Table, err)
		}
		sw, err := purgeSweep(p.Layout, p.Table, p.RelayDatabase, index, p.IncludeDead, micros)
		if err != nil {
			return res, fmt.Errorf("purge %s: %w", p.Table, err)
		}
		t, err := r.run(ctx, sw)
		res.Published, res.Dead, res.Batches = t.deleted-t.dead, t.dead, t.batches
		if err != nil {
			return res, fmt.Errorf("purge %s: %w", p.Table, err)
		}
	}
	t, err := r.run(ctx, failedEventsSweep(p.Table, p.RelayDatabase, micros))
	res.FailedEvents, res.Audit = t.deleted, t.beside
	if err != nil {
		return res, fmt.Errorf("prune %s.failed_events of %s: %w", p.RelayDatabase, p.Table, err)
	}
	t, err = r.run(ctx, retryStateSweep(p.Layout, p.Table, p.RelayDatabase, p.Source))
	res.RetryState = t.deleted
	if err != nil {
		return res, fmt.Errorf("prune %s.retry_state of %s: %w", p.RelayDatabase, p.Source, err)
	}
	return res, nil
}

func cmpOr[T int | time.Duration](v, def T) T {
	if v <= 0 {
		return def
	}
	return v
}

// purger runs sweeps in batches.
type purger struct {
	db                         *sql.DB
	p                          PurgeParams
	setTimeouts, resetTimeouts string
}

// totals add up a sweep's batches. For a dry run deleted and its parts are
// what would be deleted.
type totals struct {
	deleted, dead, beside int64
	batches               int
}

// candidate is a row a batch found to delete.
type candidate struct {
	key  string
	dead bool
}

// run deletes what sw selects, batch after batch, each starting after the
// key the previous one ended at, until a batch finds fewer rows than it
// may take. A dry run goes through the same candidates and deletes none.
func (r *purger) run(ctx context.Context, sw sweep) (totals, error) {
	var (
		t       totals
		cursor  *string
		retries int
	)
	for {
		if t.batches > 0 || retries > 0 {
			if err := sleep(ctx, r.p.Pause); err != nil {
				return t, err
			}
		}
		b, err := r.batch(ctx, sw, cursor)
		if err != nil {
			if isLockTimeout(err) && retries < purgeLockRetries && ctx.Err() == nil {
				retries++
				continue
			}
			if isPrivilegeError(err) {
				return t, fmt.Errorf("batch %d: %w: %w", t.batches+1, source.ErrNoPrivilege, err)
			}
			return t, fmt.Errorf("batch %d: %w", t.batches+1, err)
		}
		retries = 0
		t.batches++
		t.deleted += b.deleted
		t.dead += b.dead
		t.beside += b.beside
		if b.found < r.p.BatchSize || b.last == "" {
			return t, nil
		}
		cursor = &b.last
	}
}

// batchResult is what one batch found and deleted.
type batchResult struct {
	found                 int
	last                  string // the last key found
	deleted, dead, beside int64
}

// batch runs one batch on a connection of its own, whose lock timeouts it
// sets and puts back; the batch's statements share one transaction.
func (r *purger) batch(ctx context.Context, sw sweep, cursor *string) (batchResult, error) {
	var b batchResult
	ctx, cancel := context.WithTimeout(ctx, r.p.StatementTimeout)
	defer cancel()
	conn, err := r.db.Conn(ctx)
	if err != nil {
		return b, fmt.Errorf("connection: %w", err)
	}
	defer conn.Close()
	if _, err := conn.ExecContext(ctx, r.setTimeouts); err != nil {
		return b, fmt.Errorf("set lock timeouts: %w", err)
	}
	defer func() {
		// A connection whose timeouts could not be put back is not
		// handed back to the pool.
		if _, err := conn.ExecContext(context.WithoutCancel(ctx), r.resetTimeouts); err != nil {
			_ = conn.Raw(func(any) error { return driver.ErrBadConn })
		}
	}()
	tx, err := conn.BeginTx(ctx, &sql.TxOptions{Isolation: sql.LevelReadCommitted})
	if err != nil {
		return b, fmt.Errorf("begin: %w", err)
	}
	defer func() { _ = tx.Rollback() }()

	cands, err := r.find(ctx, tx, sw, cursor)
	if err != nil {
		return b, fmt.Errorf("find: %w", err)
	}
	b.found = len(cands)
	if b.found == 0 {
		return b, nil
	}
	b.last = cands[len(cands)-1].key
	if sw.keep != nil {
		keys := make([]string, len(cands))
		for i, c := range cands {
			keys[i] = c.key
		}
		kept, err := sw.keep(ctx, tx, keys)
		if err != nil {
			return b, fmt.Errorf("find: %w", err)
		}
		cands = slices.DeleteFunc(cands, func(c candidate) bool { return kept[c.key] })
		if len(cands) == 0 {
			return b, nil
		}
	}
	dead := map[string]bool{}
	keys := make([]string, 0, len(cands))
	for _, c := range cands {
		keys = append(keys, c.key)
		dead[c.key] = c.dead
	}

	if r.p.DryRun {
		b.deleted = int64(len(keys))
		for _, k := range keys {
			if dead[k] {
				b.dead++
			}
		}
		if sw.besideOf != "" {
			if err := tx.QueryRowContext(ctx, fmt.Sprintf(sw.besideOf, placeholders(len(keys), sw.delWrap)),
				keyArgs(nil, keys)...).Scan(&b.beside); err != nil {
				return b, fmt.Errorf("count: %w", err)
			}
		}
		return b, nil
	}

	// One statement a key, to lock and to delete: a lookup by the key,
	// whatever the table's size. Given a list of keys, the planner may
	// scan a small table instead, even with FORCE INDEX: a locking read
	// would then lock every row it passes for a moment, pending ones
	// included, and a delete would wait for every row another transaction
	// holds.
	lock := fmt.Sprintf(sw.lock, placeholders(1, sw.lockWrap))
	var locked []string
	for _, k := range keys {
		err := scanKeys(ctx, tx, lock, append(append([]any(nil), sw.lockArgs...), k), func(k string) { locked = append(locked, k) })
		if err != nil {
			return b, fmt.Errorf("lock: %w", err)
		}
	}
	if len(locked) == 0 {
		return b, nil
	}
	for _, k := range locked {
		for i, stmt := range sw.deletes {
			res, err := tx.ExecContext(ctx, stmt, append(append([]any(nil), sw.delArgs...), k)...)
			if err != nil {
				return b, fmt.Errorf("delete: %w", err)
			}
			n, err := res.RowsAffected()
			if err != nil {
				return b, fmt.Errorf("delete: %w", err)
			}
			if i == 0 {
				b.deleted += n
			} else {
				b.beside += n
			}
		}
	}
	for _, k := range locked {
		if dead[k] {
			b.dead++
		}
	}
	if err := tx.Commit(); err != nil {
		return b, fmt.Errorf("commit: %w", err)
	}
	return b, nil
}

// find returns a batch's candidates, after cursor.
func (r *purger) find(ctx context.Context, tx *sql.Tx, sw sweep, cursor *string) ([]candidate, error) {
	q, args := sw.find, append([]any(nil), sw.args...)
	if cursor != nil {
		q, args = sw.findAfter, append(args, *cursor)
	}
	args = append(args, r.p.BatchSize)
	rows, err := tx.QueryContext(ctx, q, args...)
	if err != nil {
		return nil, err
	}
	defer rows.Close()
	var out []candidate
	for rows.Next() {
		var c candidate
		if err := rows.Scan(&c.key, &c.dead); err != nil {
			return nil, err
		}
		out = append(out, c)
	}
	return out, rows.Err()
}

// isLockTimeout says whether a statement gave up waiting for a lock, a
// row's or a table's (both are error 1205).
func isLockTimeout(err error) bool {
	me, ok := errors.AsType[*gomysql.MySQLError](err)
	return ok && me.Number == 1205
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
