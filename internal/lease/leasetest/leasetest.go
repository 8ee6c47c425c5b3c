// Package leasetest is the conformance suite every lease.Store passes
// against its real database. A dialect's tests call Run with a Harness: the
// harness knows the dialect (how to migrate a database, start an owner's
// process, open a store on an outbox table, count its rows), the suite knows
// what leases must do.
//
// What the suite proves:
//
//   - a free shard is acquired with term 1; a live owner's unexpired lease
//     is not taken; the holder renews it and acquires it again with the
//     same term; a released lease is taken at once with the next term, and
//     its former holder can no longer renew it;
//   - an expired lease of a live owner is taken over with the next term,
//     and the lease of an owner whose process is gone is taken at once,
//     without waiting for its expiry;
//   - a deposed holder is fenced: its open batch's completion fails with
//     lease.ErrLeaseLost and records nothing, it claims nothing, and the new
//     holder claims and completes every row;
//   - EndOwner ends a previous owner's open claim and returns once its rows
//     are free;
//   - a lease remembers every owner whose claims nobody ended (A -> B -> C
//     where B lost the lease before ending A's claims: C must end both),
//     until its holder records them ended;
//   - Hold (always under a Balancer, which renews the process's leases)
//     runs the work only while it holds the lease, with the store fenced
//     by it, releases it when stopped (another owner takes it at once),
//     stops the work when a renewal finds the lease taken, and, taking a
//     lease over, ends every unended owner's claims before the work claims
//     anything;
//   - RenewAll renews, in one statement, exactly the owner's leases still
//     held unexpired with their terms;
//   - a census counts the live replicas and the shards each holds: a
//     replica whose sessions are gone counts while its last heartbeat is
//     younger than half the TTL (a blip) and not after (dead), one whose
//     heartbeat expired does not count however connected (frozen), nor one
//     that left; a lease handed over is reserved for its successor, and
//     counted as its successor's meanwhile;
//   - replicas running Hold under a Balancer share the shards: one alone
//     holds all, a joining one gets its share from the others, a leaving
//     one's shards are taken within a third of the TTL, and no shard's work
//     ever runs in two owners at once.
package leasetest

import (
	"testing"

	"github.com/outbox-relay/outbox-relay/internal/lease"
	"github.com/outbox-relay/outbox-relay/internal/source"
)

// Harness gives the suite fresh databases of one dialect. It must be safe
// for use by parallel tests.
type Harness interface {
	// NewEnv creates a database with the relay's migrations applied and
	// an outbox table holding rows pending rows of one key, in order. It
	// is dropped when t ends.
	NewEnv(t *testing.T, rows int) Env
	// DeposedClaimFails says a deposed holder's claim fails with
	// lease.ErrLeaseLost; otherwise it may also return no batch and no
	// error.
	DeposedClaimFails() bool
}

// Env is one database made by a Harness.
type Env interface {
	// Owner starts a relay process: connections of its own marked with
	// the owner's name, as a relay process's are. name is made unique on
	// the server by the harness (Owner.Name tells the result). The owner
	// counts as alive from its first Acquire until Die.
	Owner(t *testing.T, name string) Owner
	// Table is the outbox table as Store.EndOwner takes it.
	Table() string
	// ExpireAll makes every lease of the database expired now.
	ExpireAll(t *testing.T)
	// Pending counts the rows still to be delivered.
	Pending(t *testing.T) int
	// DeadLetters counts the entries of the dead-letter table.
	DeadLetters(t *testing.T) int
	// Free counts the rows no transaction holds locked.
	Free(t *testing.T) int
}

// Owner is one relay process of an Env.
type Owner interface {
	Name() string
	// Leases is the owner's lease table.
	Leases() *lease.Leases
	// Store opens a store of the outbox table for shard on the owner's
	// connections, ordering on; it implements lease.Fenced.
	Store(t *testing.T, shard string) source.Store
	// Die ends the process: its connections close, and with them what
	// tells other replicas it is alive.
	Die(t *testing.T)
}

// Run runs the suite, each case in a parallel subtest with an Env of its
// own: owners ending each other's claims at once is what replicas do.
func Run(t *testing.T, h Harness) {
	for _, tc := range []struct {
		name string
		fn   func(*testing.T, Harness)
	}{
		{"EndOwnerEndsTheClaims", testEndOwner},
		{"HandoverEndsEveryUnended", testHandoverEndsEveryUnended},
		{"AcquireRenewRelease", testAcquireRenewRelease},
		{"ExpiredLeaseTakenOver", testExpiredTakeover},
		{"GoneOwnerTakenOverAtOnce", testGoneOwnerTakeover},
		{"DeposedHolderFenced", testDeposedHolderFenced},
		{"UnendedOwners", testUnendedOwners},
		{"HoldReleasesOnStop", testHoldReleases},
		{"HoldStopsWhenLost", testHoldStopsWhenLost},
		{"Census", testCensus},
		{"HandOverReserved", testHandOverReserved},
		{"Balance", testBalance},
		{"RenewAll", testRenewAll},
	} {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			tc.fn(t, h)
		})
	}
}

// fence returns the fence of a store the harness opened.
func fence(t *testing.T, st source.Store) *lease.Fence {
	t.Helper()
	f, ok := st.(lease.Fenced)
	if !ok {
		t.Fatalf("%T has no lease fence", st)
	}
	return f.LeaseFence()
}

// all lists every row index of a batch.
func all(b source.Batch) []int {
	out := make([]int, len(b.Rows()))
	for i := range out {
		out[i] = i
	}
	return out
}
