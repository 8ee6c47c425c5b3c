package leasetest

import (
	"context"
	"slices"
	"testing"
	"time"

	"github.com/outbox-relay/outbox-relay/internal/lease"
)

// acquire takes shard for o or fails the test; want is the term expected
// and prev the previous owner ("" for none).
func acquire(t *testing.T, o Owner, shard string, ttl time.Duration, term int64, prev string) *lease.Lease {
	t.Helper()
	l, err := o.Leases().Acquire(context.Background(), shard, ttl)
	if err != nil || l == nil {
		t.Fatalf("%s acquires %s: %+v %v", o.Name(), shard, l, err)
	}
	if l.Term != term || l.PreviousOwner != prev || l.Owner != o.Name() || l.Shard != shard {
		t.Fatalf("%s's lease on %s: %+v; want term %d, previous owner %q", o.Name(), shard, l, term, prev)
	}
	return l
}

// refused checks that o cannot acquire shard.
func refused(t *testing.T, o Owner, shard, why string) {
	t.Helper()
	if l, err := o.Leases().Acquire(context.Background(), shard, time.Minute); err != nil || l != nil {
		t.Fatalf("%s acquired %s %s: %+v %v", o.Name(), shard, why, l, err)
	}
}

// renews checks whether o's renewal of l (the balancer's RenewAll) extends
// it.
func renews(t *testing.T, o Owner, l *lease.Lease, want bool) {
	t.Helper()
	renewed, err := o.Leases().RenewAll(context.Background(), []*lease.Lease{l}, time.Minute)
	if err != nil || renewed[l.Shard] != want {
		t.Fatalf("%s renews term %d: %v %v, want %v", o.Name(), l.Term, renewed, err, want)
	}
}

func testAcquireRenewRelease(t *testing.T, h Harness) {
	ctx := context.Background()
	env := h.NewEnv(t, 0)
	a, b := env.Owner(t, "a"), env.Owner(t, "b")
	la := acquire(t, a, "s", time.Minute, 1, "")
	refused(t, b, "s", "from a live owner")
	renews(t, a, la, true)
	// Its holder acquires it again: same term, no previous owner.
	acquire(t, a, "s", time.Minute, 1, "")
	// a releases: b takes over at once with a new term and learns who had
	// it; a can no longer renew it.
	if err := a.Leases().Release(ctx, la); err != nil {
		t.Fatal(err)
	}
	lb := acquire(t, b, "s", time.Minute, 2, a.Name())
	renews(t, a, la, false)
	refused(t, a, "s", "back from its live holder")
	renews(t, b, lb, true)
}

func testExpiredTakeover(t *testing.T, h Harness) {
	env := h.NewEnv(t, 0)
	a, c := env.Owner(t, "a"), env.Owner(t, "c")
	la := acquire(t, a, "t", time.Millisecond, 1, "")
	time.Sleep(10 * time.Millisecond)
	// a is alive but its lease expired: c takes it with the next term.
	acquire(t, c, "t", time.Minute, 2, a.Name())
	renews(t, a, la, false)
	refused(t, a, "t", "back from its live holder")
}

func testGoneOwnerTakeover(t *testing.T, h Harness) {
	ctx := context.Background()
	env := h.NewEnv(t, 0)
	b, c := env.Owner(t, "b"), env.Owner(t, "c")
	acquire(t, b, "s", time.Minute, 1, "")
	refused(t, c, "s", "from a live owner")
	// b's process ends: c takes over long before the lease's minute is
	// out (the database may take a moment to see b's connections gone).
	b.Die(t)
	deadline := time.Now().Add(10 * time.Second)
	for {
		l, err := c.Leases().Acquire(ctx, "s", time.Minute)
		if err != nil {
			t.Fatal(err)
		}
		if l != nil {
			if l.Term != 2 || l.PreviousOwner != b.Name() {
				t.Fatalf("c over a gone owner: %+v", l)
			}
			return
		}
		if time.Now().After(deadline) {
			t.Fatal("c did not take over the lease of a gone owner")
		}
		time.Sleep(50 * time.Millisecond)
	}
}

// testUnendedOwners checks that a lease remembers every owner whose claims
// nobody has ended yet: a, b and c are three live owners' leases on one
// table. b takes over from a and loses the lease before it ends a's claims;
// c, taking over from b, must end a's as well as b's. Once c says it ended
// them, the next owner ends c's only.
func testUnendedOwners(t *testing.T, h Harness) {
	ctx := context.Background()
	env := h.NewEnv(t, 0)
	a, b, c := env.Owner(t, "ua"), env.Owner(t, "ub"), env.Owner(t, "uc")
	take := func(who Owner, name string, want ...string) *lease.Lease {
		t.Helper()
		l, err := who.Leases().Acquire(ctx, "unended", time.Minute)
		if err != nil || l == nil {
			t.Fatalf("%s acquires: %+v %v", name, l, err)
		}
		if !slices.Equal(l.Unended, want) && (len(l.Unended) > 0 || len(want) > 0) {
			t.Fatalf("%s's lease: owners to end %q, want %q", name, l.Unended, want)
		}
		return l
	}
	release := func(who Owner, l *lease.Lease) {
		t.Helper()
		if err := who.Leases().Release(ctx, l); err != nil {
			t.Fatal(err)
		}
	}
	la := take(a, "a")
	release(a, la)
	lb := take(b, "b", a.Name())
	release(b, lb) // lost before it ended a's claims
	lc := take(c, "c", a.Name(), b.Name())
	take(c, "c again", a.Name(), b.Name())
	if err := c.Leases().Ended(ctx, lc); err != nil {
		t.Fatal(err)
	}
	take(c, "c after ending them")
	release(c, lc)
	take(a, "a over c", c.Name())
}
