package postgres_test

import (
	"context"
	"errors"
	"testing"
	"time"

	"github.com/jackc/pgx/v5/pgxpool"

	"github.com/outbox-relay/outbox-relay/internal/fixtures"
	"github.com/outbox-relay/outbox-relay/internal/layout"
	"github.com/outbox-relay/outbox-relay/internal/pgtest"
	"github.com/outbox-relay/outbox-relay/internal/source"
	"github.com/outbox-relay/outbox-relay/internal/source/postgres"
)

// ownerPool is a pool whose sessions carry owner's application_name, as a
// relay process's do.
func ownerPool(t *testing.T, dsn, owner string) *pgxpool.Pool {
	return pgtest.Pool(t, dsn, postgres.ApplicationName(owner))
}

// TestDeposedHolderCompletesNothing guards the lease check in the completing
// transaction: a batch claimed under term 1 cannot complete once another
// owner holds the source, whatever its outcome, and a deposed holder cannot
// claim; under the current term both work.
func TestDeposedHolderCompletesNothing(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	dsn, pool := migrated(t)
	pgtest.Exec(t, pool, fixtures.Seed001)
	pgtest.Exec(t, pool, `INSERT INTO outbox (aggregate_type, aggregate_id, event_type, topic, payload)
SELECT 'Order', gen_random_uuid(), 'order.placed', 'orders', jsonb_build_object('n', n) FROM generate_series(1, 4) n`)
	tbl := postgres.Table{Schema: "public", Name: "outbox"}
	a := postgres.NewLeases(ownerPool(t, dsn, "a"), relaySchema, "a")
	la, err := a.Acquire(ctx, "s", time.Minute)
	if err != nil || la == nil {
		t.Fatalf("a: %+v %v", la, err)
	}
	st, _ := newStore(t, ownerPool(t, dsn, "a"), "s", tbl, "status", layout.Spec{}, true)
	st.Fence.Set(la)
	b1, err := st.Claim(ctx, 2)
	if err != nil || b1 == nil {
		t.Fatalf("claim: %v %v", b1, err)
	}
	// b takes the source over (a's lease expired) while a's batch is open.
	pgtest.Exec(t, pool, `UPDATE outbox_relay.leases SET expires_at = now() - interval '1 second'`)
	b := postgres.NewLeases(pool, relaySchema, "b")
	lb, err := b.Acquire(ctx, "s", time.Minute)
	if err != nil || lb == nil || lb.Term != 2 {
		t.Fatalf("b: %+v %v", lb, err)
	}
	err = b1.Complete(ctx, source.Outcome{Published: []int{0},
		Dead: []source.Dead{{Index: 1, Attempts: 1, Reason: "refused", PayloadIsJSON: true}}})
	if !errors.Is(err, source.ErrLeaseLost) {
		t.Fatalf("deposed holder's Complete = %v, want ErrLeaseLost", err)
	}
	var pending, dead int
	_ = pool.QueryRow(ctx, "SELECT count(*) FROM outbox WHERE status = 'pending'").Scan(&pending)
	_ = pool.QueryRow(ctx, "SELECT count(*) FROM outbox_relay.failed_events").Scan(&dead)
	if pending != 4 || dead != 0 {
		t.Fatalf("after the deposed holder's completion: %d pending (want 4), %d dead letters (want 0)", pending, dead)
	}
	// A deposed holder claims nothing: its claim statement locks no row
	// (were it to, even for a moment, the new holder's claim would skip
	// the row and take later rows of its key first).
	if b2, err := st.Claim(ctx, 2); b2 != nil || (err != nil && !errors.Is(err, source.ErrLeaseLost)) {
		if b2 != nil {
			_ = b2.Release(ctx)
		}
		t.Fatalf("deposed holder's Claim = %v, %v; want no batch", b2, err)
	}
	// The new holder's batch completes.
	st2, _ := newStore(t, pool, "s", tbl, "status", layout.Spec{}, true)
	st2.Fence.Set(lb)
	b3, err := st2.Claim(ctx, 10)
	if err != nil || b3 == nil {
		t.Fatalf("claim: %v %v", b3, err)
	}
	if err := b3.Complete(ctx, source.Outcome{Published: []int{0, 1, 2, 3}}); err != nil {
		t.Fatalf("the holder's Complete: %v", err)
	}
}

// TestEndOwnerEndsTheClaims guards the hand-over: the new owner ends the
// previous owner's claim transactions on the table and returns only once
// they are gone; a session of the previous owner without a claim on the
// table is left alone.
func TestEndOwnerEndsTheClaims(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	dsn, pool := migrated(t)
	pgtest.Exec(t, pool, fixtures.Seed001)
	pgtest.Exec(t, pool, `INSERT INTO outbox (aggregate_type, aggregate_id, event_type, topic, payload)
SELECT 'Order', gen_random_uuid(), 'order.placed', 'orders', '{}' FROM generate_series(1, 4) n`)
	tbl := postgres.Table{Schema: "public", Name: "outbox"}
	aPool := ownerPool(t, dsn, "a")
	st, _ := newStore(t, aPool, "s", tbl, "status", layout.Spec{}, true)
	held, err := st.Claim(ctx, 2) // a frozen holder's open claim
	if err != nil || held == nil {
		t.Fatalf("claim: %v %v", held, err)
	}
	idle, err := aPool.Begin(ctx) // a's transaction on another table
	if err != nil {
		t.Fatal(err)
	}
	defer func() { _ = idle.Rollback(ctx) }()
	if _, err := idle.Exec(ctx, "SELECT count(*) FROM outbox_relay.leases"); err != nil {
		t.Fatal(err)
	}
	b := postgres.NewLeases(pool, relaySchema, "b")
	wctx, cancel := context.WithTimeout(ctx, 10*time.Second)
	defer cancel()
	if err := b.EndOwner(wctx, "a", tbl.String(), func(err error) { t.Log(err) }); err != nil {
		t.Fatalf("EndOwner: %v", err)
	}
	// The claim is gone: its rows are free and its completion fails.
	var free int
	_ = pool.QueryRow(ctx, "SELECT count(*) FROM (SELECT 1 FROM outbox FOR UPDATE SKIP LOCKED) x").Scan(&free)
	if free != 4 {
		t.Fatalf("%d rows free after EndOwner, want 4", free)
	}
	if err := held.Complete(ctx, source.Outcome{Published: []int{0, 1}}); err == nil {
		t.Fatal("the ended claim completed")
	}
	if _, err := idle.Exec(ctx, "SELECT 1"); err != nil {
		t.Fatalf("a's session without a claim on the table was ended: %v", err)
	}
}
