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

	gomysql "github.com/go-sql-driver/mysql"

	"github.com/outbox-relay/outbox-relay/internal/layout"
	"github.com/outbox-relay/outbox-relay/internal/source"
)

// PurgeParams say which table Purge cleans, for which source, and how
// (source.PurgeOptions: the age, dead letters, batches, pauses, timeouts).
type PurgeParams struct {
	Source        string // the source's name, as retry_state knows it
	Table         Table
	RelayDatabase string // default DefaultRelayDatabase
	Layout        *layout.Layout
	source.PurgeOptions
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
	if p.Layout == nil {
		return PurgeResult{}, fmt.Errorf("purge %s: layout not resolved", p.Table)
	}
	if err := p.Table.Validate(); err != nil {
		return PurgeResult{}, fmt.Errorf("purge: %w", err)
	}
	if p.RelayDatabase == "" {
		p.RelayDatabase = DefaultRelayDatabase
	}
	if err := ValidateIdent("relay_database", p.RelayDatabase); err != nil {
		return PurgeResult{}, fmt.Errorf("purge %s: %w", p.Table, err)
	}
	p.LockTimeout, p.StatementTimeout = source.PurgeTimeouts(p.LockTimeout, p.StatementTimeout)
	secs := strconv.Itoa(max(1, int(math.Ceil(p.LockTimeout.Seconds()))))
	d := &purgeDriver{db: db, p: p, micros: p.OlderThan.Microseconds(),
		setTimeouts:   "SET SESSION innodb_lock_wait_timeout = " + secs + ", lock_wait_timeout = " + secs,
		resetTimeouts: "SET SESSION innodb_lock_wait_timeout = DEFAULT, lock_wait_timeout = DEFAULT"}
	return source.Purge(ctx, d, source.PurgeRun{
		Table: p.Table.String(), Relay: p.RelayDatabase, Source: p.Source, KeptRows: p.Layout.Mode == "delete",
		PurgeOptions: p.PurgeOptions,
	})
}

// purgeDriver runs a retention run's batches on MySQL and MariaDB.
type purgeDriver struct {
	db                         *sql.DB
	p                          PurgeParams
	micros                     int64 // the age, in microseconds
	setTimeouts, resetTimeouts string
}

func (d *purgeDriver) OutboxSweep(ctx context.Context, includeDead bool) (sweep, error) {
	index, err := keyIndex(ctx, d.db, d.p.Table, d.p.Layout.ID.Name)
	if err != nil {
		return sweep{}, err
	}
	return purgeSweep(d.p.Layout, d.p.Table, d.p.RelayDatabase, index, includeDead, d.micros)
}

func (d *purgeDriver) DeadLetterSweep() sweep {
	return failedEventsSweep(d.p.Table, d.p.RelayDatabase, d.micros)
}

func (d *purgeDriver) RetryStateSweep() sweep {
	return retryStateSweep(d.p.Layout, d.p.Table, d.p.RelayDatabase, d.p.Source)
}

// candidate is a row a batch found to delete.
type candidate struct {
	key  string
	dead bool
}

// PurgeBatch runs one batch; a refused grant is wrapped in source.ErrNoPrivilege.
func (d *purgeDriver) PurgeBatch(ctx context.Context, sw sweep, cursor *string, limit int, dryRun bool) (source.PurgeBatch, error) {
	b, err := d.batch(ctx, sw, cursor, limit, dryRun)
	if err != nil && isPrivilegeError(err) {
		return b, fmt.Errorf("%w: %w", source.ErrNoPrivilege, err)
	}
	return b, err
}

// IsLockTimeout says whether a statement gave up waiting for a lock, a
// row's or a table's (both are error 1205).
func (*purgeDriver) IsLockTimeout(err error) bool {
	me, ok := errors.AsType[*gomysql.MySQLError](err)
	return ok && me.Number == 1205
}

// batch runs one batch on a connection of its own, whose lock timeouts it
// sets and puts back; the batch's statements share one transaction. A dry
// run goes through the same candidates and deletes none.
func (d *purgeDriver) batch(ctx context.Context, sw sweep, cursor *string, limit int, dryRun bool) (source.PurgeBatch, error) {
	var b source.PurgeBatch
	ctx, cancel := context.WithTimeout(ctx, d.p.StatementTimeout)
	defer cancel()
	conn, err := d.db.Conn(ctx)
	if err != nil {
		return b, fmt.Errorf("connection: %w", err)
	}
	defer conn.Close()
	if _, err := conn.ExecContext(ctx, d.setTimeouts); err != nil {
		return b, fmt.Errorf("set lock timeouts: %w", err)
	}
	defer func() {
		// A connection whose timeouts could not be put back is not
		// handed back to the pool.
		if _, err := conn.ExecContext(context.WithoutCancel(ctx), d.resetTimeouts); err != nil {
			_ = conn.Raw(func(any) error { return driver.ErrBadConn })
		}
	}()
	tx, err := conn.BeginTx(ctx, &sql.TxOptions{Isolation: sql.LevelReadCommitted})
	if err != nil {
		return b, fmt.Errorf("begin: %w", err)
	}
	defer func() { _ = tx.Rollback() }()

	cands, err := find(ctx, tx, sw, cursor, limit)
	if err != nil {
		return b, fmt.Errorf("find: %w", err)
	}
	b.Found = len(cands)
	if b.Found == 0 {
		return b, nil
	}
	b.Last = cands[len(cands)-1].key
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

	if dryRun {
		b.Deleted = int64(len(keys))
		for _, k := range keys {
			if dead[k] {
				b.Dead++
			}
		}
		if sw.besideOf != "" {
			if err := tx.QueryRowContext(ctx, fmt.Sprintf(sw.besideOf, placeholders(len(keys), sw.delWrap)),
				keyArgs(nil, keys)...).Scan(&b.Beside); err != nil {
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
				b.Deleted += n
			} else {
				b.Beside += n
			}
		}
	}
	for _, k := range locked {
		if dead[k] {
			b.Dead++
		}
	}
	if err := tx.Commit(); err != nil {
		return b, fmt.Errorf("commit: %w", err)
	}
	return b, nil
}

// find returns a batch's candidates, at most limit, after cursor.
func find(ctx context.Context, tx *sql.Tx, sw sweep, cursor *string, limit int) ([]candidate, error) {
	q, args := sw.find, append([]any(nil), sw.args...)
	if cursor != nil {
		q, args = sw.findAfter, append(args, *cursor)
	}
	args = append(args, limit)
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
