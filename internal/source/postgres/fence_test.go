package postgres_test

import (
	"context"
	"testing"
	"time"

	"github.com/jackc/pgx/v5/pgxpool"

	"github.com/outbox-relay/outbox-relay/internal/fixtures"
	"github.com/outbox-relay/outbox-relay/internal/layout"
	"github.com/outbox-relay/outbox-relay/internal/pgtest"
	"github.com/outbox-relay/outbox-relay/internal/source/postgres"
)

// ownerPool is a pool whose sessions carry owner's application_name, as a
// relay process's do.
func ownerPool(t *testing.T, dsn, owner string) *pgxpool.Pool {
	return pgtest.Pool(t, dsn, postgres.ApplicationName(owner))
}

// TestEndOwnerLeavesOtherTables: ending the previous owner's claims on a
// table (see the lease conformance suite) leaves alone a session of that
// owner whose transaction holds nothing on the table.
func TestEndOwnerLeavesOtherTables(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	dsn, pool := migrated(t)
	pgtest.Exec(t, pool, fixtures.Seed001)
	pgtest.Exec(t, pool, `INSERT INTO outbox (aggregate_type, aggregate_id, event_type, topic, payload)
SELECT 'Order', gen_random_uuid(), 'order.placed', 'orders', '{}' FROM generate_series(1, 4) n`)
	tbl := postgres.Table{Schema: "public", Name: "outbox"}
	owner := "a-" + pgtest.Suffix()
	aPool := ownerPool(t, dsn, owner)
	st, _ := newStore(t, aPool, "s", tbl, "status", layout.Spec{}, true)
	held, err := st.Claim(ctx, 2) // a frozen holder's open claim
	if err != nil || held == nil {
		t.Fatalf("claim: %v %v", held, err)
	}
	defer func() { _ = held.Release(ctx) }()
	idle, err := aPool.Begin(ctx) // a's transaction on another table
	if err != nil {
		t.Fatal(err)
	}
	defer func() { _ = idle.Rollback(ctx) }()
	if _, err := idle.Exec(ctx, "SELECT count(*) FROM outbox_relay.leases"); err != nil {
		t.Fatal(err)
	}
	b := postgres.NewLeases(pool, relaySchema, "b-"+pgtest.Suffix())
	wctx, cancel := context.WithTimeout(ctx, 10*time.Second)
	defer cancel()
	if err := b.EndOwner(wctx, owner, tbl.String(), func(err error) { t.Log(err) }); err != nil {
		t.Fatalf("EndOwner: %v", err)
	}
	var free int
	_ = pool.QueryRow(ctx, "SELECT count(*) FROM (SELECT 1 FROM outbox FOR UPDATE SKIP LOCKED) x").Scan(&free)
	if free != 4 {
		t.Fatalf("%d rows free after EndOwner, want 4", free)
	}
	if _, err := idle.Exec(ctx, "SELECT 1"); err != nil {
		t.Fatalf("a's session without a claim on the table was ended: %v", err)
	}
}
