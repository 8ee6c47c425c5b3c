package mysql_test

import (
	"context"
	"testing"
	"time"

	"github.com/outbox-relay/outbox-relay/internal/mytest"
	"github.com/outbox-relay/outbox-relay/internal/source/mysql"
	"github.com/outbox-relay/outbox-relay/internal/source/sourcetest"
)

func TestLeases(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	e := newEnv(t)
	// Owner names are server-wide (named locks): unique per test.
	sfx := mytest.Suffix()
	ownerA, ownerB, ownerC := "a-"+sfx, "b-"+sfx, "c-"+sfx
	aDB := e.open(t, mysql.ConnOptions{Owner: ownerA})
	a := mysql.NewLeases(aDB, e.relayDB, ownerA)
	b := mysql.NewLeases(e.db, e.relayDB, ownerB)
	c := mysql.NewLeases(e.db, e.relayDB, ownerC)
	defer a.Close()
	defer c.Close()

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
	if again, err := a.Acquire(ctx, "s", time.Minute); err != nil || again == nil || again.Term != 1 || again.PreviousOwner != "" {
		t.Fatalf("a again: %+v %v", again, err)
	}
	// a releases: b takes over with a new term and learns who had it.
	if err := a.Release(ctx, la); err != nil {
		t.Fatal(err)
	}
	lb, err := b.Acquire(ctx, "s", time.Minute)
	if err != nil || lb == nil || lb.Term != 2 || lb.PreviousOwner != ownerA {
		t.Fatalf("b after release: %+v %v", lb, err)
	}
	if ok, _ := a.Renew(ctx, la, time.Minute); ok {
		t.Fatal("a renewed a lease it no longer holds")
	}
	if lc, err := c.Acquire(ctx, "s", time.Minute); err != nil || lc != nil {
		t.Fatalf("c took live b's lease: %+v %v", lc, err)
	}
	// b's process ends (its liveness lock goes): c takes over at once,
	// without waiting for the TTL.
	if err := b.Close(); err != nil {
		t.Fatal(err)
	}
	lc, err := c.Acquire(ctx, "s", time.Minute)
	if err != nil || lc == nil || lc.Term != 3 || lc.PreviousOwner != ownerB {
		t.Fatalf("c over a gone owner: %+v %v", lc, err)
	}
	// An expired lease of a live owner is taken too.
	if _, err := a.Acquire(ctx, "t", time.Millisecond); err != nil {
		t.Fatal(err)
	}
	time.Sleep(10 * time.Millisecond)
	if lt, err := c.Acquire(ctx, "t", time.Minute); err != nil || lt == nil || lt.PreviousOwner != ownerA {
		t.Fatalf("c over an expired lease: %+v %v", lt, err)
	}

	// WaitForOwner returns once the previous owner has no transaction open.
	tx, err := aDB.BeginTx(ctx, nil)
	if err != nil {
		t.Fatal(err)
	}
	if _, err := tx.ExecContext(ctx, "SELECT * FROM "+e.relayDB+".leases FOR UPDATE"); err != nil {
		t.Fatal(err)
	}
	wctx, cancel := context.WithTimeout(ctx, 300*time.Millisecond)
	if err := c.WaitForOwner(wctx, ownerA); err == nil {
		t.Fatal("WaitForOwner returned while a's transaction was open")
	}
	cancel()
	_ = tx.Rollback()
	wctx, cancel = context.WithTimeout(ctx, 5*time.Second)
	defer cancel()
	if err := c.WaitForOwner(wctx, ownerA); err != nil {
		t.Fatal(err)
	}
}

func TestLeaseRemembersUnendedOwners(t *testing.T) {
	t.Parallel()
	e := newEnv(t)
	sfx := mytest.Suffix()
	owners := [3]string{"ua-" + sfx, "ub-" + sfx, "uc-" + sfx}
	var ls [3]*mysql.Leases
	for i, o := range owners {
		ls[i] = mysql.NewLeases(e.open(t, mysql.ConnOptions{Owner: o}), e.relayDB, o)
		defer ls[i].Close()
	}
	sourcetest.UnendedOwners(t, ls[0], ls[1], ls[2], owners)
}
