package mysql

import (
	"context"
	"database/sql"
	"errors"
	"fmt"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	gomysql "github.com/go-sql-driver/mysql"

	"github.com/outbox-relay/outbox-relay/internal/lease"
	"github.com/outbox-relay/outbox-relay/internal/source"
)

// Lease is a shard held by this process (the seam's type).
type Lease = source.Lease

// Leases grants shards to one owner at a time through the relay database's
// leases table (see lease.Leases).
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
	*lease.Leases
	store *LeaseStore
}

// NewLeases returns the lease table of relayDB for owner.
func NewLeases(db *sql.DB, relayDB, owner string) *Leases {
	st := NewLeaseStore(db, relayDB, owner)
	return &Leases{Leases: lease.New(st, owner), store: st}
}

// Close gives up the liveness lock: to other replicas, this owner is gone.
func (l *Leases) Close() error { return l.store.Close() }

// WaitForOwner waits until no connection of owner has a transaction open
// (see LeaseStore.WaitForOwner).
func (l *Leases) WaitForOwner(ctx context.Context, owner string) error {
	return l.store.WaitForOwner(ctx, owner)
}

// LeaseStore is the lease table of a relay database: lease.Store in
// MySQL's SQL. Its Get, Renew, RenewAll and Census keep owner's liveness
// lock (every acquisition begins with a Get, the balancer renews with
// RenewAll and takes a census every third of the TTL).
type LeaseStore struct {
	db    *sql.DB
	rdb   string
	owner string

	mu   sync.Mutex
	live *sql.Conn // holds ownerLiveLock(owner)

	bellMu sync.Mutex
	bell   *sql.Conn    // waits between censuses (see Wait)
	bellID int64        // its CONNECTION_ID(), 0 before the first Wait
	heard  atomic.Int64 // the ring count as the last Wait left it
}

var _ lease.Bell = (*LeaseStore)(nil)

var _ lease.Store = (*LeaseStore)(nil)

// NewLeaseStore returns the lease table of relayDB, kept alive for owner.
func NewLeaseStore(db *sql.DB, relayDB, owner string) *LeaseStore {
	if relayDB == "" {
		relayDB = DefaultRelayDatabase
	}
	return &LeaseStore{db: db, rdb: QuoteIdent(relayDB), owner: owner}
}

// LeaseFence implements lease.Fenced.
func (s *Store) LeaseFence() *lease.Fence { return &s.Fence }

// Close gives up the liveness lock: to other replicas, this owner is gone.
// It also ends the bell's wait on the server, which outlives a wait given
// up by the client (see Wait).
func (l *LeaseStore) Close() error {
	l.bellMu.Lock()
	if l.bell != nil {
		l.dropBell(context.Background())
	}
	l.bellMu.Unlock()
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
func (l *LeaseStore) stayAlive(ctx context.Context) error {
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

// Alive implements lease.Store: an owner is alive while some connection
// holds its liveness lock.
func (l *LeaseStore) Alive(ctx context.Context, p *lease.AliveParams) (bool, error) {
	var alive bool
	err := l.db.QueryRowContext(ctx, "SELECT IS_USED_LOCK(?) IS NOT NULL", ownerLiveLock(p.Owner)).Scan(&alive)
	return alive, err
}

// Get implements lease.Store (and keeps this owner alive).
func (l *LeaseStore) Get(ctx context.Context, p *lease.GetParams) (*lease.Row, error) {
	if err := l.stayAlive(ctx); err != nil {
		return nil, err
	}
	var r lease.Row
	err := l.db.QueryRowContext(ctx, "SELECT owner, term, expires_at < "+now+", unended, successor, "+
		"successor <> '' AND expires_at > "+now+" - INTERVAL ? MICROSECOND FROM "+l.rdb+".leases WHERE shard = ?",
		p.Reserve.Microseconds(), p.Shard).Scan(&r.Owner, &r.Term, &r.Expired, &r.Unended, &r.Successor, &r.Reserved)
	if errors.Is(err, sql.ErrNoRows) {
		return nil, nil
	}
	if err != nil {
		return nil, err
	}
	return &r, nil
}

// Insert implements lease.Store.
func (l *LeaseStore) Insert(ctx context.Context, p *lease.InsertParams) (bool, error) {
	_, err := l.db.ExecContext(ctx, "INSERT INTO "+l.rdb+".leases (shard, owner, term, acquired_at, expires_at) VALUES (?, ?, 1, "+
		now+", "+now+" + INTERVAL ? MICROSECOND)", p.Shard, p.Owner, p.TTL.Microseconds())
	if isDuplicate(err) {
		return false, nil // another replica inserted it first
	}
	return err == nil, err
}

func isDuplicate(err error) bool {
	var me *gomysql.MySQLError
	return errors.As(err, &me) && me.Number == 1062
}

// Take implements lease.Store.
func (l *LeaseStore) Take(ctx context.Context, p *lease.TakeParams) (bool, error) {
	return l.update(ctx, "owner = ?, term = term + 1, acquired_at = "+now+", expires_at = "+now+" + INTERVAL ? MICROSECOND, unended = ?, successor = ''",
		" AND expires_at < "+now, []any{p.Owner, p.TTL.Microseconds(), p.Unended}, p.Shard, p.Holder, p.Term)
}

// Renew implements lease.Store (and keeps this owner alive).
func (l *LeaseStore) Renew(ctx context.Context, p *lease.RenewParams) (bool, error) {
	if err := l.stayAlive(ctx); err != nil {
		return false, err
	}
	return l.update(ctx, "expires_at = "+now+" + INTERVAL ? MICROSECOND", "", []any{p.TTL.Microseconds()}, p.Shard, p.Owner, p.Term)
}

// RenewAll implements lease.Store (and keeps this owner alive): one UPDATE
// for every lease of the owner, then a read of those it holds unexpired
// (MySQL's UPDATE returns no rows).
func (l *LeaseStore) RenewAll(ctx context.Context, p *lease.RenewAllParams) (map[string]bool, error) {
	if err := l.stayAlive(ctx); err != nil {
		return nil, err
	}
	if len(p.Shards) == 0 {
		return map[string]bool{}, nil
	}
	pairs := "(?, ?)" + strings.Repeat(", (?, ?)", len(p.Shards)-1)
	held := make([]any, 0, 2*len(p.Shards))
	for i, s := range p.Shards {
		held = append(held, s, p.Terms[i])
	}
	_, err := l.db.ExecContext(ctx, "UPDATE "+l.rdb+".leases SET expires_at = "+now+" + INTERVAL ? MICROSECOND "+
		"WHERE owner = ? AND expires_at >= "+now+" AND (shard, term) IN ("+pairs+")",
		append([]any{p.TTL.Microseconds(), p.Owner}, held...)...)
	if err != nil {
		return nil, err
	}
	rows, err := l.db.QueryContext(ctx, "SELECT shard FROM "+l.rdb+".leases WHERE owner = ? AND expires_at > "+now+
		" AND (shard, term) IN ("+pairs+")", append([]any{p.Owner}, held...)...)
	if err != nil {
		return nil, err
	}
	defer rows.Close()
	out := map[string]bool{}
	for rows.Next() {
		var s string
		if err := rows.Scan(&s); err != nil {
			return nil, err
		}
		out[s] = true
	}
	return out, rows.Err()
}

// Expire implements lease.Store. MySQL has no notifications: the
// balancer rings the successor's bell (see Wait) once the lease is
// handed over.
func (l *LeaseStore) Expire(ctx context.Context, p *lease.ExpireParams) error {
	_, err := l.update(ctx, "expires_at = "+now+" - INTERVAL 1 MICROSECOND, successor = ?", "", []any{p.Successor}, p.Shard, p.Owner, p.Term)
	return err
}

// Census implements lease.Store: a replica has a session while a
// connection holds its liveness lock.
func (l *LeaseStore) Census(ctx context.Context, p *lease.CensusParams) ([]lease.Replica, error) {
	if err := l.stayAlive(ctx); err != nil {
		return nil, err
	}
	var bell sql.NullInt64
	l.bellMu.Lock()
	if l.bellID != 0 {
		bell = sql.NullInt64{Int64: l.bellID, Valid: true}
	}
	l.bellMu.Unlock()
	_, err := l.db.ExecContext(ctx, "INSERT INTO "+l.rdb+".replicas (owner, expires_at, bell) VALUES (?, "+now+" + INTERVAL ? MICROSECOND, ?) "+
		"ON DUPLICATE KEY UPDATE expires_at = VALUES(expires_at), bell = COALESCE(VALUES(bell), bell)", p.Owner, p.TTL.Microseconds(), bell)
	if err != nil {
		return nil, fmt.Errorf("census of the replicas: %w", err)
	}
	if _, err := l.db.ExecContext(ctx, "DELETE FROM "+l.rdb+".replicas WHERE expires_at < "+now+" - INTERVAL 1 HOUR"); err != nil {
		return nil, fmt.Errorf("census of the replicas: %w", err)
	}
	rows, err := l.db.QueryContext(ctx, "SELECT owner, TIMESTAMPDIFF(MICROSECOND, "+now+", expires_at), "+
		"IS_USED_LOCK(CONCAT('outbox-relay ', LEFT(SHA2(owner, 256), 20), ' live')) IS NOT NULL FROM "+l.rdb+".replicas")
	if err != nil {
		return nil, fmt.Errorf("census of the replicas: %w", err)
	}
	defer rows.Close()
	var out []lease.Replica
	at := map[string]int{}
	for rows.Next() {
		var (
			r    lease.Replica
			left int64
		)
		if err := rows.Scan(&r.Owner, &left, &r.Session); err != nil {
			return nil, fmt.Errorf("census of the replicas: %w", err)
		}
		r.Left = time.Duration(left) * time.Microsecond
		at[r.Owner] = len(out)
		out = append(out, r)
	}
	if err := rows.Err(); err != nil {
		return nil, fmt.Errorf("census of the replicas: %w", err)
	}
	if len(p.Shards) == 0 {
		return out, nil
	}
	// A lease handed over and still reserved counts as its successor's.
	q := "SELECT IF(expires_at >= " + now + ", owner, successor) AS o, COUNT(*) FROM " + l.rdb + ".leases WHERE shard IN (?" +
		strings.Repeat(", ?", len(p.Shards)-1) + ") AND (expires_at >= " + now +
		" OR successor <> '' AND expires_at > " + now + " - INTERVAL ? MICROSECOND) GROUP BY o"
	args := make([]any, 0, len(p.Shards)+1)
	for _, s := range p.Shards {
		args = append(args, s)
	}
	args = append(args, p.Reserve.Microseconds())
	held, err := l.db.QueryContext(ctx, q, args...)
	if err != nil {
		return nil, fmt.Errorf("census of the replicas: %w", err)
	}
	defer held.Close()
	for held.Next() {
		var (
			o string
			n int
		)
		if err := held.Scan(&o, &n); err != nil {
			return nil, fmt.Errorf("census of the replicas: %w", err)
		}
		if i, ok := at[o]; ok {
			out[i].Holds = n
		}
	}
	return out, held.Err()
}

// Wait implements lease.Bell: one statement on a connection of its own,
// whose id the census records as the replica's bell, reads the replica's
// ring count and SLEEPs unless the count moved since the last Wait; Ring
// adds one to the count, then kills the bell's query, which ends the SLEEP
// early. A ring whose KILL came between two Waits (it ended nothing) is
// heard by the next Wait's read: the count was written before the KILL.
// Reading the count in the SLEEP's own statement leaves no moment between
// the read and the SLEEP when a KILL would be lost; it holds a shared
// metadata lock on the replicas table while it sleeps (a third of the TTL
// at most), which only DDL on that table waits for. A user may kill its
// own connections' queries.
func (l *LeaseStore) Wait(ctx context.Context, owner string, d time.Duration) (bool, error) {
	bell, err := l.bellConn(ctx, owner)
	if err != nil {
		return false, err
	}
	heard := l.heard.Load()
	var (
		ring  int64
		slept int
	)
	err = bell.QueryRowContext(ctx, "SELECT ring, IF(ring = ?, SLEEP(?), 0) FROM (SELECT COALESCE(MAX(ring), 0) AS ring FROM "+
		l.rdb+".replicas WHERE owner = ?) r", heard, d.Seconds(), owner).Scan(&ring, &slept)
	switch {
	case interrupted(err) || err == nil && slept == 1:
		// Killed: MariaDB ends the statement with "query execution was
		// interrupted", MySQL may return 1 from the SLEEP.
		l.hear(ctx, bell, owner)
		return true, nil
	case err != nil:
		l.bellMu.Lock()
		if l.bell == bell {
			l.dropBell(ctx)
		}
		l.bellMu.Unlock()
		return false, fmt.Errorf("bell: %w", err)
	case ring != heard:
		l.heard.Store(ring) // rung since the last Wait
		return true, nil
	}
	return false, nil
}

// hear records the ring count after a ring ended a Wait, so that the next
// Wait does not count that ring again. A count it could not read is left as
// it was: the next Wait then returns at once, which costs a census.
func (l *LeaseStore) hear(ctx context.Context, bell *sql.Conn, owner string) {
	var ring int64
	err := bell.QueryRowContext(ctx, "SELECT COALESCE(MAX(ring), 0) FROM "+l.rdb+".replicas WHERE owner = ?", owner).Scan(&ring)
	if err == nil {
		l.heard.Store(ring)
	}
}

// interrupted says err is MariaDB's answer to a killed query.
func interrupted(err error) bool {
	var me *gomysql.MySQLError
	return errors.As(err, &me) && me.Number == 1317
}

// dropBell closes the bell's connection, first ending its query on the
// server: a SLEEP whose client went away (a wait whose context ended) goes
// on there for a while, holding its lock on the replicas table. The caller
// holds bellMu.
func (l *LeaseStore) dropBell(ctx context.Context) {
	kctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), 2*time.Second)
	_, _ = l.db.ExecContext(kctx, fmt.Sprintf("KILL QUERY %d", l.bellID))
	cancel()
	_ = l.bell.Close()
	l.bell = nil
}

// bellConn is the bell's connection, opened and recorded on first use.
func (l *LeaseStore) bellConn(ctx context.Context, owner string) (*sql.Conn, error) {
	l.bellMu.Lock()
	defer l.bellMu.Unlock()
	if l.bell != nil {
		return l.bell, nil
	}
	c, err := l.db.Conn(ctx)
	if err != nil {
		return nil, fmt.Errorf("bell: %w", err)
	}
	var id int64
	if err := c.QueryRowContext(ctx, "SELECT CONNECTION_ID()").Scan(&id); err != nil {
		_ = c.Close()
		return nil, fmt.Errorf("bell: %w", err)
	}
	if _, err := l.db.ExecContext(ctx, "UPDATE "+l.rdb+".replicas SET bell = ? WHERE owner = ?", id, owner); err != nil {
		_ = c.Close()
		return nil, fmt.Errorf("bell: %w", err)
	}
	l.bell, l.bellID = c, id
	return c, nil
}

// Ring implements lease.Bell: while owner's heartbeat is live (so that the
// connection id is still its), it adds one to owner's ring count, then kills
// the query of owner's bell (see Wait). Two KILLs of one query at once can
// hold each other up on the server for seconds (seen on MariaDB 10.11 when
// a replica hands several shards to one successor): the ringers of an owner,
// in every process, take turns through a named lock.
func (l *LeaseStore) Ring(ctx context.Context, owner string) error {
	res, err := l.db.ExecContext(ctx, "UPDATE "+l.rdb+".replicas SET ring = ring + 1 WHERE owner = ? AND expires_at > "+now, owner)
	if err != nil {
		return fmt.Errorf("ring %s: %w", owner, err)
	}
	if n, err := res.RowsAffected(); err != nil || n == 0 {
		return err // not a live replica
	}
	var id int64
	err = l.db.QueryRowContext(ctx, "SELECT bell FROM "+l.rdb+".replicas WHERE owner = ? AND bell IS NOT NULL AND expires_at > "+now,
		owner).Scan(&id)
	if errors.Is(err, sql.ErrNoRows) {
		return nil // no bell yet: its first wait reads the count
	}
	if err != nil {
		return fmt.Errorf("ring %s: %w", owner, err)
	}
	conn, err := l.db.Conn(ctx)
	if err != nil {
		return fmt.Errorf("ring %s: %w", owner, err)
	}
	defer conn.Close()
	// A turn not had within a few seconds is not waited for longer: the
	// KILL still goes.
	var turn sql.NullInt64
	if err := conn.QueryRowContext(ctx, "SELECT GET_LOCK(?, 5)", ownerRingLock(owner)).Scan(&turn); err != nil {
		return fmt.Errorf("ring %s: %w", owner, err)
	}
	if turn.Valid && turn.Int64 == 1 {
		defer func() {
			_, _ = conn.ExecContext(context.WithoutCancel(ctx), "DO RELEASE_LOCK(?)", ownerRingLock(owner))
		}()
	}
	if _, err := conn.ExecContext(ctx, fmt.Sprintf("KILL QUERY %d", id)); err != nil {
		return fmt.Errorf("ring %s: %w", owner, err)
	}
	return nil
}

// Leave implements lease.Store.
func (l *LeaseStore) Leave(ctx context.Context, p *lease.LeaveParams) error {
	if _, err := l.db.ExecContext(ctx, "DELETE FROM "+l.rdb+".replicas WHERE owner = ?", p.Owner); err != nil {
		return fmt.Errorf("leave the replicas: %w", err)
	}
	return nil
}

// Ended implements lease.Store.
func (l *LeaseStore) Ended(ctx context.Context, p *lease.EndedParams) error {
	_, err := l.update(ctx, "unended = ''", "", nil, p.Shard, p.Owner, p.Term)
	return err
}

// update sets set (with args) on the lease of shard held by owner with
// term, where cond also holds; true when it changed the row.
func (l *LeaseStore) update(ctx context.Context, set, cond string, args []any, shard, owner string, term int64) (bool, error) {
	res, err := l.db.ExecContext(ctx, "UPDATE "+l.rdb+".leases SET "+set+" WHERE shard = ? AND owner = ? AND term = ?"+cond,
		append(args, shard, owner, term)...)
	if err != nil {
		return false, err
	}
	n, err := res.RowsAffected()
	return n == 1, err
}

// EndOwner implements lease.Store: it kills every transaction of owner's connections (see
// WaitForOwner) that began before the call (a user may kill its own
// connections), until two readings find none. Transactions the owner begins
// later fail their lease check and are left alone, so the owner's other
// sources are not held up. table is not used: transactions are not
// attributed to tables. A connection it may not kill is waited for instead,
// and said so in the error passed to warn. Without the PROCESS privilege it
// waits, as WaitForOwner does.
func (l *LeaseStore) EndOwner(ctx context.Context, p *lease.EndOwnerParams) error {
	owner, warn := p.Owner, p.Warn
	prefix := ownerConnPrefix(owner)
	start := time.Now()
	quiet := false
	for {
		// A transaction begun before the call has been open at least as
		// long as the call (the server counts whole seconds).
		ids, err := l.ownerTransactions(ctx, prefix, time.Since(start)-time.Second)
		if err != nil {
			var me *gomysql.MySQLError
			if errors.As(err, &me) && (me.Number == 1227 || me.Number == 1142) {
				return l.WaitForOwner(ctx, owner)
			}
			return fmt.Errorf("look for the previous owner's transactions: %w", err)
		}
		// A transaction seen open but not yet killed may be ending on
		// its own: only two readings of none mean none.
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
		case <-time.After(50 * time.Millisecond):
		}
	}
}

// ownerTransactions lists the connections of the owner named by prefix with
// a transaction open for at least minAge.
func (l *LeaseStore) ownerTransactions(ctx context.Context, prefix string, minAge time.Duration) ([]int64, error) {
	open, err := openTransactions(ctx, l.db)
	if err != nil {
		return nil, err
	}
	var threads []int64
	for _, t := range open {
		if t.age >= minAge {
			threads = append(threads, t.thread)
		}
	}
	return ownerConnections(ctx, l.db, prefix, threads)
}

// WaitForOwner waits until no connection of owner has a transaction open
// (its claims are then committed or rolled back), or until ctx ends. It is
// what keeps a stalled previous owner's batches from overlapping with the
// new owner's after a hand-over.
//
// An owner's connections are those OpenWith marked with its name
// (ConnOptions.Owner); their transactions are found in the InnoDB status,
// which needs the PROCESS privilege (see openTransactions). Without it, the wait lasts while the owner
// is alive at all (the caller bounds it).
func (l *LeaseStore) WaitForOwner(ctx context.Context, owner string) error {
	prefix := ownerConnPrefix(owner)
	quiet := false
	for {
		ids, err := l.ownerTransactions(ctx, prefix, 0)
		open := len(ids)
		if err != nil {
			var me *gomysql.MySQLError
			if !errors.As(err, &me) || (me.Number != 1227 && me.Number != 1142) {
				return fmt.Errorf("look for the previous owner's transactions: %w", err)
			}
			alive, aerr := l.Alive(ctx, &lease.AliveParams{Owner: owner})
			if aerr != nil {
				return fmt.Errorf("look for the previous owner: %w", aerr)
			}
			open = 0
			if alive {
				open = 1
			}
		}
		// Only two readings of none mean none.
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
