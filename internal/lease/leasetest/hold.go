package leasetest

import (
	"context"
	"log/slog"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/outbox-relay/outbox-relay/internal/lease"
	"github.com/outbox-relay/outbox-relay/internal/source"
)

// hold runs a balancer of o's leases with ttl, as a relay process does
// for each database, and Hold under it in the background; the returned
// function stops both and waits until they have returned.
func hold(t *testing.T, o Owner, ttl time.Duration, opts lease.HoldOptions, work func(ctx context.Context)) (stop func()) {
	t.Helper()
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan struct{})
	b := lease.NewBalancer(o.Leases(), ttl, nil)
	go func() {
		defer close(done)
		var wg sync.WaitGroup
		wg.Go(func() { b.Run(ctx) })
		b.Hold(ctx, opts, work)
		wg.Wait()
	}()
	stop = func() {
		t.Helper()
		cancel()
		select {
		case <-done:
		case <-time.After(30 * time.Second):
			t.Fatalf("%s's Hold did not return once stopped", o.Name())
		}
	}
	t.Cleanup(func() { cancel(); <-done })
	return stop
}

// within waits for ch or fails the test after d.
func within[T any](t *testing.T, ch <-chan T, d time.Duration, what string) T {
	t.Helper()
	select {
	case v := <-ch:
		return v
	case <-time.After(d):
		t.Fatalf("%s: not within %v", what, d)
		panic("unreachable")
	}
}

// testHoldReleases: the work runs with the store fenced by the lease held,
// and a Hold that stops releases the lease so that another owner takes it
// at once.
func testHoldReleases(t *testing.T, h Harness) {
	env := h.NewEnv(t, 0)
	a, b := env.Owner(t, "a"), env.Owner(t, "b")
	f := fence(t, a.Store(t, "s"))
	started := make(chan *lease.Lease, 1)
	stop := hold(t, a, time.Minute, lease.HoldOptions{Shard: "s", Table: env.Table(), Fence: f},
		func(ctx context.Context) { started <- f.Get(); <-ctx.Done() })
	l := within(t, started, 10*time.Second, "a's work starts")
	if l == nil || l.Term != 1 || l.Owner != a.Name() {
		t.Fatalf("a's work runs fenced by %+v, want a's lease of term 1", l)
	}
	refused(t, b, "s", "while a holds it")
	stop()
	if l := f.Get(); l != nil {
		t.Fatalf("the store is still fenced by %+v once the work stopped", l)
	}
	acquire(t, b, "s", time.Minute, 2, a.Name())
}

// testHoldStopsWhenLost: a holder whose lease was taken stops its work at
// the next renewal (the balancer's one statement renews the process's
// leases), told by the renewal, not by its trust window running out (which
// would stop it too, later), then stands by without disturbing the new
// holder.
func testHoldStopsWhenLost(t *testing.T, h Harness) {
	env := h.NewEnv(t, 0)
	a, b := env.Owner(t, "a"), env.Owner(t, "b")
	started, stopped := make(chan struct{}, 1), make(chan struct{}, 1)
	logged := &lines{}
	stop := hold(t, a, 900*time.Millisecond, lease.HoldOptions{Shard: "s", Table: env.Table(),
		Logger: slog.New(slog.NewTextHandler(logged, nil))},
		func(ctx context.Context) { started <- struct{}{}; <-ctx.Done(); stopped <- struct{}{} })
	within(t, started, 10*time.Second, "a's work starts")
	env.ExpireAll(t)
	lb := acquire(t, b, "s", time.Minute, 2, a.Name())
	within(t, stopped, 5*time.Second, "a's work stops once its lease is taken")
	if out := logged.String(); !strings.Contains(out, "lease lost to another replica; stopping") {
		t.Fatalf("a stopped without a renewal finding its lease taken:\n%s", out)
	}
	select {
	case <-started:
		t.Fatal("a's work started again while b holds the lease")
	case <-time.After(time.Second):
	}
	stop()
	renews(t, b, lb, true)
}

// testHandoverEndsEveryUnended: a's claim is open when b takes the lease
// over, and b loses it before ending a's claims; c, holding the lease next,
// ends a's claims (and b's) before its work claims, which then finds every
// row free, and records them ended.
func testHandoverEndsEveryUnended(t *testing.T, h Harness) {
	ctx := context.Background()
	env := h.NewEnv(t, 4)
	a := env.Owner(t, "a")
	la := acquire(t, a, "s", time.Minute, 1, "")
	sa := a.Store(t, "s")
	fence(t, sa).Set(la)
	held, err := sa.Claim(ctx, 2) // a frozen holder's open claim
	if err != nil || held == nil {
		t.Fatalf("claim: %v %v", held, err)
	}
	// Given back however the test ends: a pool closes once its connections are.
	t.Cleanup(func() { _ = held.Release(context.WithoutCancel(ctx)) })
	env.ExpireAll(t)
	b := env.Owner(t, "b")
	lb := acquire(t, b, "s", time.Minute, 2, a.Name())
	if err := b.Leases().Release(ctx, lb); err != nil { // lost before it ended a's claims
		t.Fatal(err)
	}
	c := env.Owner(t, "c")
	sc := c.Store(t, "s")
	o := lease.HoldOptions{Shard: "s", Table: env.Table(), Fence: fence(t, sc)}
	if s, ok := sc.(interface {
		Settle(ctx context.Context, n int, timeout time.Duration) error
	}); ok {
		o.Settle = func(ctx context.Context) error { return s.Settle(ctx, 8, 5*time.Second) }
	}
	claimed := make(chan int, 1)
	stop := hold(t, c, time.Minute, o, func(ctx context.Context) {
		n := 0
		if b, err := sc.Claim(ctx, 10); err != nil || b == nil {
			t.Logf("c's claim: %v %v", b, err)
		} else {
			n = len(b.Rows())
			if err := b.Complete(ctx, source.Outcome{Published: all(b)}); err != nil {
				t.Errorf("c's Complete: %v", err)
			}
		}
		select {
		case claimed <- n:
		default:
		}
		<-ctx.Done()
	})
	if n := within(t, claimed, 20*time.Second, "c's work claims"); n != 4 {
		t.Fatalf("c claimed %d rows, want all 4: an unended owner's claim still holds some", n)
	}
	stop()
	if err := held.Complete(ctx, source.Outcome{Published: []int{0, 1}}); err == nil {
		t.Fatal("a's claim completed after c took over")
	}
	if n := env.Pending(t); n != 0 {
		t.Fatalf("%d rows pending, want 0", n)
	}
	// c recorded a and b ended: its lease names no one to end.
	if lc := acquire(t, c, "s", time.Minute, 3, ""); len(lc.Unended) > 0 {
		t.Fatalf("c's lease still names %q to end", lc.Unended)
	}
}
