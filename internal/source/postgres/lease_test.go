package postgres_test

import (
	"context"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"

	"github.com/outbox-relay/outbox-relay/internal/source/postgres"
	"github.com/outbox-relay/outbox-relay/internal/source/sourcetest"
)

func TestLeases(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	dsn, pool := migrated(t)
	// Owner a is alive: it has a connection carrying its application_name.
	cfg, err := pgx.ParseConfig(dsn)
	if err != nil {
		t.Fatal(err)
	}
	cfg.RuntimeParams["application_name"] = postgres.ApplicationName("a")
	aConn, err := pgx.ConnectConfig(ctx, cfg)
	if err != nil {
		t.Fatal(err)
	}
	a := postgres.NewLeases(pool, relaySchema, "a")
	b := postgres.NewLeases(pool, relaySchema, "b")
	c := postgres.NewLeases(pool, relaySchema, "c")

	la, err := a.Acquire(ctx, "s", time.Minute)
	if err != nil || la == nil || la.Term != 1 {
		t.Fatalf("a: %+v %v", la, err)
	}
	if lb, err := b.Acquire(ctx, "s", time.Minute); err != nil || lb != nil {
		t.Fatalf("b took a live owner's lease: %+v %v", lb, err)
	}
	if ok, err := a.Renew(ctx, la, time.Minute); !ok || err != nil {
		t.Fatalf("renew: %v %v", ok, err)
	}
	// a releases: b takes over with a new term and learns who had it.
	if err := a.Release(ctx, la); err != nil {
		t.Fatal(err)
	}
	lb, err := b.Acquire(ctx, "s", time.Minute)
	if err != nil || lb == nil || lb.Term != 2 || lb.PreviousOwner != "a" {
		t.Fatalf("b after release: %+v %v", lb, err)
	}
	if ok, _ := a.Renew(ctx, la, time.Minute); ok {
		t.Fatal("a renewed a lease it no longer holds")
	}
	// b has no connection of its own: as far as the database can tell its
	// process is gone, so c takes over without waiting for the expiry.
	lc, err := c.Acquire(ctx, "s", time.Minute)
	if err != nil || lc == nil || lc.Term != 3 || lc.PreviousOwner != "b" {
		t.Fatalf("c over a gone owner: %+v %v", lc, err)
	}
	_ = aConn.Close(ctx)
}

func TestLeaseRemembersUnendedOwners(t *testing.T) {
	t.Parallel()
	_, pool := migrated(t)
	a := postgres.NewLeases(pool, relaySchema, "ua")
	b := postgres.NewLeases(pool, relaySchema, "ub")
	c := postgres.NewLeases(pool, relaySchema, "uc")
	sourcetest.UnendedOwners(t, a, b, c, [3]string{"ua", "ub", "uc"})
}
