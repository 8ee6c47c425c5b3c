package leasetest

import (
	"context"
	"errors"
	"testing"
	"time"

	"github.com/outbox-relay/outbox-relay/internal/lease"
	"github.com/outbox-relay/outbox-relay/internal/source"
)

// testDeposedHolderFenced guards the term checks of a batch: a batch
// claimed under term 1 cannot complete once another owner holds the
// source, whatever its outcome, and a deposed holder cannot claim; under
// the current term both work.
func testDeposedHolderFenced(t *testing.T, h Harness) {
	ctx := context.Background()
	env := h.NewEnv(t, 4)
	a := env.Owner(t, "a")
	la := acquire(t, a, "s", time.Minute, 1, "")
	st := a.Store(t, "s")
	fence(t, st).Set(la)
	b1, err := st.Claim(ctx, 2)
	if err != nil || b1 == nil {
		t.Fatalf("claim: %v %v", b1, err)
	}
	// Given back however the test ends: a pool closes once its connections are.
	t.Cleanup(func() { _ = b1.Release(context.WithoutCancel(ctx)) })
	// b takes the source over (a's lease expired) while a's batch is open.
	env.ExpireAll(t)
	b := env.Owner(t, "b")
	lb := acquire(t, b, "s", time.Minute, 2, a.Name())
	err = b1.Complete(ctx, source.Outcome{Published: []int{0},
		Dead: []source.Dead{{Index: 1, Attempts: 1, Reason: "refused", PayloadIsJSON: true}}})
	if !errors.Is(err, lease.ErrLeaseLost) {
		t.Fatalf("deposed holder's Complete = %v, want ErrLeaseLost", err)
	}
	if pending, dead := env.Pending(t), env.DeadLetters(t); pending != 4 || dead != 0 {
		t.Fatalf("after the deposed holder's completion: %d pending (want 4), %d dead letters (want 0)", pending, dead)
	}
	// A deposed holder claims nothing: its claim statement locks no row
	// (were it to, even for a moment, the new holder's claim would skip
	// the row and take later rows of its key first).
	b2, err := st.Claim(ctx, 2)
	if b2 != nil {
		_ = b2.Release(ctx)
	}
	switch {
	case h.DeposedClaimFails() && !errors.Is(err, lease.ErrLeaseLost):
		t.Fatalf("deposed holder's Claim = %v, %v; want ErrLeaseLost", b2, err)
	case b2 != nil || (err != nil && !errors.Is(err, lease.ErrLeaseLost)):
		t.Fatalf("deposed holder's Claim = %v, %v; want no batch", b2, err)
	}
	// The new holder claims every row and completes.
	st2 := b.Store(t, "s")
	fence(t, st2).Set(lb)
	b3, err := st2.Claim(ctx, 10)
	if err != nil || b3 == nil || len(b3.Rows()) != 4 {
		t.Fatalf("the holder's claim: %v %v", b3, err)
	}
	if err := b3.Complete(ctx, source.Outcome{Published: all(b3)}); err != nil {
		t.Fatalf("the holder's Complete: %v", err)
	}
	if n := env.Pending(t); n != 0 {
		t.Fatalf("%d rows pending after the holder's completion, want 0", n)
	}
}

// testEndOwner guards the hand-over: the new owner ends the previous
// owner's open claim and returns only once it is gone.
func testEndOwner(t *testing.T, h Harness) {
	ctx := context.Background()
	env := h.NewEnv(t, 4)
	a := env.Owner(t, "a")
	held, err := a.Store(t, "s").Claim(ctx, 2) // a frozen holder's open claim
	if err != nil || held == nil {
		t.Fatalf("claim: %v %v", held, err)
	}
	// Given back however the test ends: a pool closes once its connections are.
	t.Cleanup(func() { _ = held.Release(context.WithoutCancel(ctx)) })
	if n := env.Free(t); n != 2 {
		t.Fatalf("%d rows free while a's claim holds 2 of 4", n)
	}
	b := env.Owner(t, "b")
	wctx, cancel := context.WithTimeout(ctx, 10*time.Second)
	defer cancel()
	if err := b.Leases().EndOwner(wctx, a.Name(), env.Table(), func(err error) { t.Log(err) }); err != nil {
		t.Fatalf("EndOwner: %v", err)
	}
	if n := env.Free(t); n != 4 {
		t.Fatalf("%d rows free after EndOwner, want 4", n)
	}
	if err := held.Complete(ctx, source.Outcome{Published: []int{0, 1}}); err == nil {
		t.Fatal("the ended claim completed")
	}
	if n := env.Pending(t); n != 4 {
		t.Fatalf("%d rows pending, want 4", n)
	}
}
