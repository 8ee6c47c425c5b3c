package lease

import (
	"context"
	"time"
)

// Store is the lease table of one database in its dialect: each method is
// one statement (or one driver call) and decides nothing. What to write,
// when to take a lease over and who must be ended are decided once, by
// Leases. Every write that changes a lease names the term it expects, so a
// write racing another replica's changes nothing and reports false.
//
// Each dialect implements it (postgres.LeaseStore, mysql.LeaseStore) and
// passes the conformance suite in leasetest.
type Store interface {
	// Get reads the lease row of a shard: nil (and no error) when there
	// is none.
	Get(ctx context.Context, p *GetParams) (*Row, error)
	// Insert creates the shard's row with term 1 for p.Owner; false when
	// a row exists already (another replica inserted it first).
	Insert(ctx context.Context, p *InsertParams) (bool, error)
	// Take gives the shard to p.Owner with term p.Term+1, acquired now,
	// and p.Unended as the owners to end, if the row is still p.Holder's
	// with term p.Term and expired; false otherwise.
	Take(ctx context.Context, p *TakeParams) (bool, error)
	// Renew extends the lease of p.Owner with term p.Term by p.TTL from
	// now, expired or not (its holder acquires it again); false when the
	// row is no longer so.
	Renew(ctx context.Context, p *RenewParams) (bool, error)
	// RenewAll extends by p.TTL from now every lease of p.Leases still
	// held unexpired by p.Owner with its term, in one statement (or as
	// few as the dialect can), and returns the shards it extended.
	RenewAll(ctx context.Context, p *RenewAllParams) (map[string]bool, error)
	// Expire ends the lease of p.Owner with term p.Term now.
	Expire(ctx context.Context, p *ExpireParams) error
	// Ended clears the owners to end of p.Owner's lease with term p.Term.
	Ended(ctx context.Context, p *EndedParams) error
	// Alive says whether p.Owner's process is still connected to the
	// database.
	Alive(ctx context.Context, p *AliveParams) (bool, error)
	// EndOwner ends p.Owner's claims on p.Table and returns once none is
	// left (or ctx ends). What it may not end it waits for, saying so
	// through p.Warn.
	EndOwner(ctx context.Context, p *EndOwnerParams) error
	// Census registers p.Owner as a replica with a heartbeat that expires
	// p.TTL from now and returns every registered replica as the database
	// sees it, p.Owner among them. It decides nothing: which replicas are
	// live, Leases.Census decides (see Live).
	Census(ctx context.Context, p *CensusParams) ([]Replica, error)
	// Leave removes p.Owner from the live replicas.
	Leave(ctx context.Context, p *LeaveParams) error
}

// Row is a shard's lease row as stored.
type Row struct {
	Owner   string
	Term    int64
	Expired bool   // expires_at is past, by the database's clock
	Unended string // JoinOwners of the owners to end
	// Successor is the replica the lease was handed to when its holder
	// gave it up; Reserved says the hand-over is recent (within
	// GetParams.Reserve of its end), so that only the successor takes it.
	Successor string
	Reserved  bool
}

// GetParams names the shard to read.
type GetParams struct {
	Shard   string
	Reserve time.Duration // how long a handed-over lease stays its successor's
}

// InsertParams create a shard's first lease.
type InsertParams struct {
	Shard string
	Owner string
	TTL   time.Duration
}

// TakeParams change a shard's holder.
type TakeParams struct {
	Shard   string
	Holder  string // the holder it is taken from
	Term    int64  // the holder's term
	Owner   string // the new holder (its term is Term+1)
	TTL     time.Duration
	Unended string // JoinOwners of the owners the new holder must end
}

// RenewParams extend a lease its holder acquires again.
type RenewParams struct {
	Shard string
	Owner string
	Term  int64
	TTL   time.Duration
}

// RenewAllParams extend the leases of one owner.
type RenewAllParams struct {
	Owner  string
	TTL    time.Duration
	Shards []string
	Terms  []int64 // the term of each of Shards
}

// ExpireParams end a lease now.
type ExpireParams struct {
	Shard string
	Owner string
	Term  int64
	// Successor, when set, is the replica the lease is handed to: it alone
	// may take it for a while, and replicas waiting for leases are told at
	// once where the dialect can (PostgreSQL: NOTIFY).
	Successor string
}

// Replica is a registered replica as a census reads it.
type Replica struct {
	Owner string
	// Left is how long its heartbeat has still to run, by the database's
	// clock: its TTL less the age of its last heartbeat (negative once
	// expired).
	Left time.Duration
	// Session says its process is connected to the database now (as
	// Alive says).
	Session bool
	// Holds is how many of CensusParams.Shards it holds unexpired, or
	// were handed to it and are still reserved for it (within
	// CensusParams.Reserve of the hand-over): it is about to take them,
	// and a giver counting them as nobody's would give it more.
	Holds int
}

// CensusParams register a replica and name the shards it counts.
type CensusParams struct {
	Owner   string
	TTL     time.Duration
	Shards  []string
	Reserve time.Duration // how long a handed-over lease stays its successor's
}

// LeaveParams name a replica that stops.
type LeaveParams struct {
	Owner string
}

// EndedParams say the lease's holder ended every owner it named.
type EndedParams struct {
	Shard string
	Owner string
	Term  int64
}

// AliveParams name an owner.
type AliveParams struct {
	Owner string
}

// EndOwnerParams name an owner whose claims on a table are to end.
type EndOwnerParams struct {
	Owner string
	Table string // as the dialect quotes it
	Warn  func(error)
}

// Bell is a Store whose replicas wake each other directly, for a dialect
// without notifications (MySQL): a replica waits on its bell between
// censuses, and another rings it after handing it a shard, after joining
// and after leaving. No ring is lost: one that comes while the owner is not
// waiting ends its next Wait at once.
type Bell interface {
	// Wait returns after d, or earlier (true) when the owner's bell rang
	// during the wait or since the previous Wait returned.
	Wait(ctx context.Context, owner string, d time.Duration) (bool, error)
	// Ring wakes owner's Wait, or its next one if it is not waiting.
	Ring(ctx context.Context, owner string) error
}
