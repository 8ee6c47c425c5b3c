package mysql

import (
	"context"
	"database/sql"
	"errors"
	"fmt"
	"sync"
	"time"

	gomysql "github.com/go-sql-driver/mysql"

	"github.com/outbox-relay/outbox-relay/internal/source"
)

// Lease is a shard held by this process (the seam's type).
type Lease = source.Lease

// Leases grants shards to one owner at a time through the relay database's
// leases table. Acquire takes a free or expired shard (or renews one this
// owner holds); Renew extends it; Release gives it up at once.
//
// While a Leases is in use its process holds a named lock (GET_LOCK) on a
// connection of its own: that is how other replicas see that the owner is
// alive. When the process dies the server drops the connection and the lock
// with it, and the owner's leases are taken over at once rather than after
// their TTL. Close releases the lock.
//
// A Leases is safe for concurrent use: make one per database server and
// owner and share it among every source on that server, so that the process
// keeps one connection for its liveness, not one per source. A second
// Leases of the same owner on the same server holds no connection (the lock
// is already held) but opens one on each Acquire and Renew to find that out.
type Leases struct {
	db    *sql.DB
	rdb   string
	owner string

	mu   sync.Mutex
	live *sql.Conn // holds ownerLiveLock(owner)
}

// NewLeases returns the lease table of relayDB for owner.
func NewLeases(db *sql.DB, relayDB, owner string) *Leases {
	if relayDB == "" {
		relayDB = DefaultRelayDatabase
	}
	return &Leases{db: db, rdb: QuoteIdent(relayDB), owner: owner}
}

// Close gives up the liveness lock: to other replicas, this owner is gone.
func (l *Leases) Close() error {
	l.mu.Lock()
	defer l.mu.Unlock()
	if l.live == nil {
		return nil
	}
	_, _ = l.live.ExecContext(context.Background(), "DO RELEASE_LOCK(?)", ownerLiveLock(l.owner))
	err := l.live.Close()
	l.live = nil
	return err
}

// stayAlive makes sure this owner's liveness lock is held, taking it again
// on a new connection if the old one was lost. Each call also keeps that
// connection from idling into the server's wait_timeout.
func (l *Leases) stayAlive(ctx context.Context) error {
	l.mu.Lock()
	defer l.mu.Unlock()
	name := ownerLiveLock(l.owner)
	if l.live != nil {
		var mine sql.NullBool
		err := l.live.QueryRowContext(ctx, "SELECT IS_USED_LOCK(?) = CONNECTION_ID()", name).Scan(&mine)
		if err == nil && mine.Valid && mine.Bool {
			return nil
		}
		_ = l.live.Close()
		l.live = nil
	}
	conn, err := l.db.Conn(ctx)
	if err != nil {
		return fmt.Errorf("liveness lock: %w", err)
	}
	var got sql.NullInt64
	if err := conn.QueryRowContext(ctx, "SELECT GET_LOCK(?, 0)", name).Scan(&got); err != nil {
		_ = conn.Close()
		return fmt.Errorf("liveness lock: %w", err)
	}
	if !got.Valid || got.Int64 != 1 {
		// Another Leases of this owner holds it: the owner is alive.
		_ = conn.Close()
		return nil
	}
	l.live = conn
	return nil
}

// ownerAlive says whether some connection holds owner's liveness lock.
func (l *Leases) ownerAlive(ctx context.Context, owner string) (bool, error) {
	var alive bool
	err := l.db.QueryRowContext(ctx, "SELECT IS_USED_LOCK(?) IS NOT NULL", ownerLiveLock(owner)).Scan(&alive)
	return alive, err
}

// Acquire takes shard for ttl. It returns nil (and no error) while another
// owner holds an unexpired lease on it and is alive. An owner whose
// liveness lock is free (its process died) is not waited for: its lease is
// expired at once, so a restarted relay resumes right away.
func (l *Leases) Acquire(ctx context.Context, shard string, ttl time.Duration) (*Lease, error) {
	if err := l.stayAlive(ctx); err != nil {
		return nil, fmt.Errorf("acquire lease on %s: %w", shard, err)
	}
	ls, err := l.acquire(ctx, shard, ttl)
	if ls != nil || err != nil {
		return ls, err
	}
	var (
		holder string
		term   int64
	)
	err = l.db.QueryRowContext(ctx, "SELECT owner, term FROM "+l.rdb+".leases WHERE shard = ?", shard).Scan(&holder, &term)
	if errors.Is(err, sql.ErrNoRows) {
		return nil, nil
	}
	var alive bool
	if err == nil {
		alive, err = l.ownerAlive(ctx, holder)
	}
	if err != nil {
		return nil, fmt.Errorf("look up lease holder of %s: %w", shard, err)
	}
	if alive {
		return nil, nil
	}
	if _, err := l.db.ExecContext(ctx, "UPDATE "+l.rdb+".leases SET expires_at = "+now+" - INTERVAL 1 MICROSECOND"+
		" WHERE shard = ? AND owner = ? AND term = ?", shard, holder, term); err != nil {
		return nil, fmt.Errorf("expire the lease of a gone owner on %s: %w", shard, err)
	}
	return l.acquire(ctx, shard, ttl)
}

func (l *Leases) acquire(ctx context.Context, shard string, ttl time.Duration) (*Lease, error) {
	tx, err := l.db.BeginTx(ctx, nil)
	if err != nil {
		return nil, fmt.Errorf("acquire lease on %s: %w", shard, err)
	}
	defer func() { _ = tx.Rollback() }()
	var (
		holder, unended string
		term            int64
		expired         bool
	)
	expires := now + " + INTERVAL ? MICROSECOND"
	err = tx.QueryRowContext(ctx, "SELECT owner, term, expires_at < "+now+", unended FROM "+l.rdb+".leases WHERE shard = ? FOR UPDATE", shard).
		Scan(&holder, &term, &expired, &unended)
	ls := &Lease{Shard: shard, Owner: l.owner}
	switch {
	case errors.Is(err, sql.ErrNoRows):
		_, err = tx.ExecContext(ctx, "INSERT INTO "+l.rdb+".leases (shard, owner, term, acquired_at, expires_at) VALUES (?, ?, 1, "+
			now+", "+expires+")", shard, l.owner, ttl.Microseconds())
		if isDuplicate(err) {
			return nil, nil // another replica inserted it first
		}
		ls.Term = 1
	case err != nil:
	case holder == l.owner:
		_, err = tx.ExecContext(ctx, "UPDATE "+l.rdb+".leases SET expires_at = "+expires+" WHERE shard = ?", ttl.Microseconds(), shard)
		ls.Term, ls.Unended = term, source.SplitOwners(unended)
	case expired:
		ls.Term, ls.PreviousOwner = term+1, holder
		ls.Unended = source.NextUnended(source.SplitOwners(unended), holder, l.owner)
		_, err = tx.ExecContext(ctx, "UPDATE "+l.rdb+".leases SET owner = ?, term = term + 1, acquired_at = "+now+
			", expires_at = "+expires+", unended = ? WHERE shard = ?", l.owner, ttl.Microseconds(), source.JoinOwners(ls.Unended), shard)
	default:
		return nil, nil
	}
	if err == nil {
		err = tx.Commit()
	}
	if err != nil {
		return nil, fmt.Errorf("acquire lease on %s: %w", shard, err)
	}
	return ls, nil
}

func isDuplicate(err error) bool {
	var me *gomysql.MySQLError
	return errors.As(err, &me) && me.Number == 1062
}

// Renew extends a lease this owner still holds with the same term; false
// means it was lost.
func (l *Leases) Renew(ctx context.Context, ls *Lease, ttl time.Duration) (bool, error) {
	if err := l.stayAlive(ctx); err != nil {
		return false, fmt.Errorf("renew lease on %s: %w", ls.Shard, err)
	}
	res, err := l.db.ExecContext(ctx, "UPDATE "+l.rdb+".leases SET expires_at = "+now+" + INTERVAL ? MICROSECOND"+
		" WHERE shard = ? AND owner = ? AND term = ? AND expires_at >= "+now, ttl.Microseconds(), ls.Shard, ls.Owner, ls.Term)
	if err != nil {
		return false, fmt.Errorf("renew lease on %s: %w", ls.Shard, err)
	}
	n, err := res.RowsAffected()
	if err != nil {
		return false, fmt.Errorf("renew lease on %s: %w", ls.Shard, err)
	}
	return n == 1, nil
}

// Ended says the owner of ls has ended the claims of every owner in
// ls.Unended: the next owner need not.
func (l *Leases) Ended(ctx context.Context, ls *Lease) error {
	_, err := l.db.ExecContext(ctx, "UPDATE "+l.rdb+".leases SET unended = '' WHERE shard = ? AND owner = ? AND term = ?",
		ls.Shard, ls.Owner, ls.Term)
	if err != nil {
		return fmt.Errorf("record the previous owners' claims ended on %s: %w", ls.Shard, err)
	}
	return nil
}

// Release ends a lease now so that another replica can take the shard
// without waiting for it to expire.
func (l *Leases) Release(ctx context.Context, ls *Lease) error {
	_, err := l.db.ExecContext(ctx, "UPDATE "+l.rdb+".leases SET expires_at = "+now+" - INTERVAL 1 MICROSECOND"+
		" WHERE shard = ? AND owner = ? AND term = ?", ls.Shard, ls.Owner, ls.Term)
	if err != nil {
		return fmt.Errorf("release lease on %s: %w", ls.Shard, err)
	}
	return nil
}

// EndOwner ends the previous owner's claims after a hand-over and returns
// once none is left: it kills every transaction of owner's connections (see
// WaitForOwner) that began before the call (a user may kill its own
// connections), until two readings find none. Transactions the owner begins
// later fail their lease check and are left alone, so the owner's other
// sources are not held up. table is not used: transactions are not
// attributed to tables. A connection it may not kill is waited for instead,
// and said so in the error passed to warn. Without the PROCESS privilege it
// waits, as WaitForOwner does.
func (l *Leases) EndOwner(ctx context.Context, owner string, _ string, warn func(error)) error {
	prefix := ownerConnPrefix(owner)
	var since string // the server's clock, as INNODB_TRX reads it
	if err := l.db.QueryRowContext(ctx, "SELECT CAST(NOW() AS CHAR)").Scan(&since); err != nil {
		return fmt.Errorf("look for the previous owner's transactions: %w", err)
	}
	quiet := false
	for {
		ids, err := l.ownerTransactions(ctx, prefix, since)
		if err != nil {
			var me *gomysql.MySQLError
			if errors.As(err, &me) && (me.Number == 1227 || me.Number == 1142) {
				return l.WaitForOwner(ctx, owner)
			}
			return fmt.Errorf("look for the previous owner's transactions: %w", err)
		}
		// INNODB_TRX is a cache refreshed at most ten times a second: only
		// two readings of none far enough apart mean none.
		if len(ids) == 0 {
			if quiet {
				return nil
			}
			quiet = true
		} else {
			quiet = false
		}
		for _, id := range ids {
			if _, err := l.db.ExecContext(ctx, fmt.Sprintf("KILL %d", id)); err != nil && warn != nil && ctx.Err() == nil {
				warn(fmt.Errorf("end the previous owner's connection %d: %w; waiting for it instead", id, err))
			}
		}
		select {
		case <-ctx.Done():
			return ctx.Err()
		case <-time.After(150 * time.Millisecond):
		}
	}
}

// ownerTransactions lists the connections of the owner named by prefix with
// a transaction open since before since (INNODB_TRX counts whole seconds).
func (l *Leases) ownerTransactions(ctx context.Context, prefix, since string) ([]int64, error) {
	rows, err := l.db.QueryContext(ctx, `SELECT t.trx_mysql_thread_id FROM information_schema.INNODB_TRX t
WHERE t.trx_mysql_thread_id <> CONNECTION_ID() AND t.trx_started <= ?
  AND IS_USED_LOCK(CONCAT(?, t.trx_mysql_thread_id)) = t.trx_mysql_thread_id`, since, prefix)
	if err != nil {
		return nil, err
	}
	defer rows.Close()
	var ids []int64
	for rows.Next() {
		var id int64
		if err := rows.Scan(&id); err != nil {
			return nil, err
		}
		ids = append(ids, id)
	}
	return ids, rows.Err()
}

// WaitForOwner waits until no connection of owner has a transaction open
// (its claims are then committed or rolled back), or until ctx ends. It is
// what keeps a stalled previous owner's batches from overlapping with the
// new owner's after a hand-over.
//
// An owner's connections are those OpenWith marked with its name
// (ConnOptions.Owner); their transactions are found in INNODB_TRX, which
// needs the PROCESS privilege. Without it, the wait lasts while the owner
// is alive at all (the caller bounds it).
func (l *Leases) WaitForOwner(ctx context.Context, owner string) error {
	prefix := ownerConnPrefix(owner)
	quiet := false
	for {
		var open int
		err := l.db.QueryRowContext(ctx, `SELECT COUNT(*) FROM information_schema.INNODB_TRX t
WHERE t.trx_mysql_thread_id <> CONNECTION_ID()
  AND IS_USED_LOCK(CONCAT(?, t.trx_mysql_thread_id)) = t.trx_mysql_thread_id`, prefix).Scan(&open)
		if err != nil {
			var me *gomysql.MySQLError
			if !errors.As(err, &me) || (me.Number != 1227 && me.Number != 1142) {
				return fmt.Errorf("look for the previous owner's transactions: %w", err)
			}
			alive, aerr := l.ownerAlive(ctx, owner)
			if aerr != nil {
				return fmt.Errorf("look for the previous owner: %w", aerr)
			}
			open = 0
			if alive {
				open = 1
			}
		}
		// INNODB_TRX is a cache refreshed at most ten times a second: only
		// two readings of none far enough apart mean none.
		if open == 0 {
			if quiet {
				return nil
			}
			quiet = true
		} else {
			quiet = false
		}
		select {
		case <-ctx.Done():
			return ctx.Err()
		case <-time.After(150 * time.Millisecond):
		}
	}
}
