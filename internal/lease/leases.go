package lease

import (
	"context"
	"fmt"
	"time"
)

// Leases grants shards to one owner at a time through a database's lease
// table (a Store). Acquire takes a free or expired shard (or renews one this
// owner holds); RenewAll extends the owner's leases; Release gives one up at
// once. A relay process holds its leases through a Balancer (Balancer.Hold),
// which renews them. It is safe for concurrent use as far as its Store is.
type Leases struct {
	store Store
	owner string
}

// New returns the leases of owner kept in store.
func New(store Store, owner string) *Leases {
	return &Leases{store: store, owner: owner}
}

// Owner is the process the leases are granted to.
func (l *Leases) Owner() string { return l.owner }

// step is what an owner does about a shard's lease row.
type step int

const (
	stepInsert step = iota // no row: create it with term 1
	stepKeep               // the owner's own: extend it, same term
	stepTake               // expired: take it over with the next term
	stepWait               // another owner's, unexpired
)

// decide is the one rule of acquisition.
func decide(row *Row, owner string) step {
	switch {
	case row == nil:
		return stepInsert
	case row.Owner == owner:
		return stepKeep
	case row.Expired:
		return stepTake
	default:
		return stepWait
	}
}

// Acquire takes shard for ttl. It returns nil (and no error) while another
// owner holds an unexpired lease on it and is alive, or when another
// replica changed the lease meanwhile. An owner whose process is gone (the
// Store's Alive says so) is not waited for: its lease is expired at once,
// so a restarted relay resumes right away.
func (l *Leases) Acquire(ctx context.Context, shard string, ttl time.Duration) (*Lease, error) {
	return l.acquireFair(ctx, shard, ttl, nil)
}

// acquireFair is Acquire under a balancer (nil: take whatever is free): a
// lease handed over to another replica is left to it while reserved, and a
// free or expired one is taken only while b says this process holds less
// than its share. Its own lease, or one handed to it, it always takes.
func (l *Leases) acquireFair(ctx context.Context, shard string, ttl time.Duration, b *Balancer) (*Lease, error) {
	get := &GetParams{Shard: shard}
	if b != nil {
		get.Reserve = b.reserve()
	}
	for gone := false; ; gone = true {
		row, err := l.store.Get(ctx, get)
		if err != nil {
			return nil, fmt.Errorf("acquire lease on %s: %w", shard, err)
		}
		if b != nil && !b.mayAcquire(row, l.owner) {
			return nil, nil
		}
		if decide(row, l.owner) != stepWait {
			return l.acquire(ctx, shard, ttl, row)
		}
		if gone {
			return nil, nil // taken again since the gone owner's lease was expired
		}
		alive, err := l.store.Alive(ctx, &AliveParams{Owner: row.Owner})
		if err != nil {
			return nil, fmt.Errorf("look up lease holder of %s: %w", shard, err)
		}
		if alive {
			return nil, nil
		}
		if err := l.store.Expire(ctx, &ExpireParams{Shard: shard, Owner: row.Owner, Term: row.Term}); err != nil {
			return nil, fmt.Errorf("expire the lease of a gone owner on %s: %w", shard, err)
		}
	}
}

// acquire writes what decide chose for row; nil when the row changed
// meanwhile.
func (l *Leases) acquire(ctx context.Context, shard string, ttl time.Duration, row *Row) (*Lease, error) {
	ls := &Lease{Shard: shard, Owner: l.owner, Term: 1}
	var (
		ok  bool
		err error
	)
	switch decide(row, l.owner) {
	case stepInsert:
		ok, err = l.store.Insert(ctx, &InsertParams{Shard: shard, Owner: l.owner, TTL: ttl})
	case stepKeep:
		ls.Term, ls.Unended = row.Term, NextUnended(SplitOwners(row.Unended), "", l.owner)
		ok, err = l.store.Renew(ctx, &RenewParams{Shard: shard, Owner: l.owner, Term: row.Term, TTL: ttl})
	case stepTake:
		// A change of owner adds the previous one to the owners whose
		// claims may still be open, unless it handed the lease over: it
		// did so once its work on the shard had ended, and ending its
		// sessions now would end its claims on its other shards of the
		// same table (a split source's buckets).
		ls.Term, ls.PreviousOwner = row.Term+1, row.Owner
		prev := row.Owner
		if row.Successor != "" {
			prev = ""
		}
		ls.Unended = NextUnended(SplitOwners(row.Unended), prev, l.owner)
		ok, err = l.store.Take(ctx, &TakeParams{Shard: shard, Holder: row.Owner, Term: row.Term, Owner: l.owner,
			TTL: ttl, Unended: JoinOwners(ls.Unended)})
	default:
		return nil, nil
	}
	if err != nil {
		return nil, fmt.Errorf("acquire lease on %s: %w", shard, err)
	}
	if !ok {
		return nil, nil // another replica changed the lease first
	}
	return ls, nil
}

// RenewAll extends every lease of ls (all this owner's) still held with
// its term, in one statement, and returns the shards it extended.
func (l *Leases) RenewAll(ctx context.Context, ls []*Lease, ttl time.Duration) (map[string]bool, error) {
	p := &RenewAllParams{Owner: l.owner, TTL: ttl}
	for _, x := range ls {
		p.Shards, p.Terms = append(p.Shards, x.Shard), append(p.Terms, x.Term)
	}
	renewed, err := l.store.RenewAll(ctx, p)
	if err != nil {
		return nil, fmt.Errorf("renew %d leases: %w", len(ls), err)
	}
	return renewed, nil
}

// Release ends a lease now so that another replica can take the shard
// without waiting for it to expire.
func (l *Leases) Release(ctx context.Context, ls *Lease) error { return l.HandOver(ctx, ls, "") }

// HandOver ends a lease now and names successor as the replica to take it
// (see ExpireParams.Successor); "" names none.
func (l *Leases) HandOver(ctx context.Context, ls *Lease, successor string) error {
	err := l.store.Expire(ctx, &ExpireParams{Shard: ls.Shard, Owner: ls.Owner, Term: ls.Term, Successor: successor})
	if err != nil {
		return fmt.Errorf("release lease on %s: %w", ls.Shard, err)
	}
	return nil
}

// Ended says the owner of ls has ended the claims of every owner in
// ls.Unended: the next owner need not.
func (l *Leases) Ended(ctx context.Context, ls *Lease) error {
	if err := l.store.Ended(ctx, &EndedParams{Shard: ls.Shard, Owner: ls.Owner, Term: ls.Term}); err != nil {
		return fmt.Errorf("record the previous owners' claims ended on %s: %w", ls.Shard, err)
	}
	return nil
}

// EndOwner ends owner's claims on table after a hand-over and returns once
// none is left, or when ctx ends: the new owner claims nothing before. What
// it may not end it waits for, saying so in the error passed to warn.
func (l *Leases) EndOwner(ctx context.Context, owner, table string, warn func(error)) error {
	return l.store.EndOwner(ctx, &EndOwnerParams{Owner: owner, Table: table, Warn: warn})
}

// Row reads shard's lease row as stored (nil when there is none); a
// hand-over counts as reserved for its successor within reserve of it.
func (l *Leases) Row(ctx context.Context, shard string, reserve time.Duration) (*Row, error) {
	r, err := l.store.Get(ctx, &GetParams{Shard: shard, Reserve: reserve})
	if err != nil {
		return nil, fmt.Errorf("read lease of %s: %w", shard, err)
	}
	return r, nil
}

// Census registers this owner as a live replica for ttl and returns every
// live replica (see Live), this owner always, with how many of shards it
// holds, a shard handed to it and still reserved for it included.
func (l *Leases) Census(ctx context.Context, ttl time.Duration, shards []string) (map[string]int, error) {
	counts, _, err := l.census(ctx, ttl, shards)
	return counts, err
}

// census is Census, and how long until one of the other replicas it counts
// drops out unless it beats again or reconnects (0: none is counted).
func (l *Leases) census(ctx context.Context, ttl time.Duration, shards []string) (map[string]int, time.Duration, error) {
	rs, err := l.store.Census(ctx, &CensusParams{Owner: l.owner, TTL: ttl, Shards: shards, Reserve: reserveFor(ttl)})
	if err != nil {
		return nil, 0, err
	}
	counts := map[string]int{l.owner: 0}
	var next time.Duration
	for _, r := range rs {
		if r.Owner == l.owner {
			counts[r.Owner] = r.Holds
		} else if d := liveFor(r, ttl); d > 0 {
			counts[r.Owner] = r.Holds
			if next == 0 || d < next {
				next = d
			}
		}
	}
	return counts, next, nil
}

// Live is the one rule of a replica's liveness in a census of replicas
// whose leases last ttl: its heartbeat is unexpired, and either its
// process is connected now or its last heartbeat is younger than the trust
// window (half the TTL). A replica whose connections blipped between two
// heartbeats is therefore not taken for gone, while one that was killed
// drops out within half a TTL of its last heartbeat, and one that is
// frozen or cut off (whose sessions may linger on the server for long)
// once its heartbeat has expired.
func Live(r Replica, ttl time.Duration) bool { return liveFor(r, ttl) > 0 }

// liveFor is how long r stays live (see Live) as it is now, without a new
// heartbeat or a session: 0 when it is not.
func liveFor(r Replica, ttl time.Duration) time.Duration {
	d := r.Left
	if !r.Session {
		d -= ttl - ttl/2
	}
	return max(d, 0)
}

// Leave removes this owner from the live replicas.
func (l *Leases) Leave(ctx context.Context) error {
	return l.store.Leave(ctx, &LeaveParams{Owner: l.owner})
}
