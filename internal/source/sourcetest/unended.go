package sourcetest

import (
	"context"
	"slices"
	"testing"
	"time"

	"github.com/outbox-relay/outbox-relay/internal/source"
)

// LeaseStore is what UnendedOwners needs of a dialect's leases.
type LeaseStore interface {
	Acquire(ctx context.Context, shard string, ttl time.Duration) (*source.Lease, error)
	Release(ctx context.Context, l *source.Lease) error
	Ended(ctx context.Context, l *source.Lease) error
}

// UnendedOwners checks that a lease remembers every owner whose claims
// nobody has ended yet: a, b and c are three live owners' leases on one
// table. b takes over from a and loses the lease before it ends a's claims;
// c, taking over from b, must end a's as well as b's. Once c says it ended
// them, the next owner ends c's only.
func UnendedOwners(t *testing.T, a, b, c LeaseStore, owners [3]string) {
	t.Helper()
	ctx := context.Background()
	acquire := func(who LeaseStore, name string, want ...string) *source.Lease {
		t.Helper()
		l, err := who.Acquire(ctx, "unended", time.Minute)
		if err != nil || l == nil {
			t.Fatalf("%s acquires: %+v %v", name, l, err)
		}
		if !slices.Equal(l.Unended, want) && (len(l.Unended) > 0 || len(want) > 0) {
			t.Fatalf("%s's lease: owners to end %q, want %q", name, l.Unended, want)
		}
		return l
	}
	release := func(who LeaseStore, l *source.Lease) {
		t.Helper()
		if err := who.Release(ctx, l); err != nil {
			t.Fatal(err)
		}
	}
	la := acquire(a, "a")
	release(a, la)
	lb := acquire(b, "b", owners[0])
	release(b, lb) // lost before it ended a's claims
	lc := acquire(c, "c", owners[0], owners[1])
	acquire(c, "c again", owners[0], owners[1])
	if err := c.Ended(ctx, lc); err != nil {
		t.Fatal(err)
	}
	acquire(c, "c after ending them")
	release(c, lc)
	acquire(a, "a over c", owners[2])
}
