package mysql_test

import (
	"context"
	"sync"
	"testing"
	"time"

	"github.com/outbox-relay/outbox-relay/internal/lease"
	"github.com/outbox-relay/outbox-relay/internal/mytest"
	"github.com/outbox-relay/outbox-relay/internal/source/mysql"
)

// TestBell: a replica's bell waits its time unless rung; a ring during a
// wait ends it; a ring that comes between two waits, when the KILL of the
// bell's query ends nothing, ends the next wait at once; and a ring is
// heard once: the wait after it lasts its time.
func TestBell(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	a, _, sa, sb := twoReplicas(t)
	wait := func(d time.Duration) (bool, time.Duration) {
		t.Helper()
		start := time.Now()
		rung, err := sa.Wait(ctx, a, d)
		if err != nil {
			t.Fatalf("wait: %v", err)
		}
		return rung, time.Since(start)
	}
	quiet := func(what string) {
		t.Helper()
		if rung, took := wait(200 * time.Millisecond); rung || took < 150*time.Millisecond {
			t.Fatalf("%s: rung %v after %v, want not rung after 200ms", what, rung, took)
		}
	}
	ring := func() {
		t.Helper()
		if err := sb.Ring(ctx, a); err != nil {
			t.Fatalf("ring: %v", err)
		}
	}

	// Not rung: the wait lasts its time (and opens the bell, so that
	// rings from now on kill its query).
	quiet("a bell not rung")

	// Rung during a wait.
	done := make(chan struct{})
	go func() {
		defer close(done)
		time.Sleep(300 * time.Millisecond)
		if err := sb.Ring(ctx, a); err != nil {
			t.Errorf("ring: %v", err)
		}
	}()
	if rung, took := wait(30 * time.Second); !rung || took > 10*time.Second {
		t.Fatalf("rung during the wait: rung %v after %v, want rung within a few seconds", rung, took)
	}
	<-done
	quiet("the wait after a ring during a wait") // heard once, not again

	// Rung between two waits: the KILL finds no query to end, the count
	// tells the next wait.
	ring()
	if rung, took := wait(30 * time.Second); !rung || took > 5*time.Second {
		t.Fatalf("rung between two waits: the next wait rung %v after %v, want rung at once", rung, took)
	}
	quiet("the wait after a ring between two waits")

	// A replica that is not registered (or left) is not rung, and ringing
	// it is no error.
	if err := sb.Ring(ctx, "nobody-"+mytest.Suffix()); err != nil {
		t.Fatal(err)
	}
}

// TestBellLetsGoOfReplicas: a wait reads the replicas table in its SLEEP's
// statement, and so holds a metadata lock on it; a wait given up (its
// context ended) ends its SLEEP on the server too, so that DDL on the table
// (a migration, dropping the database) does not wait for it.
func TestBellLetsGoOfReplicas(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	e := newEnv(t)
	a := "a-" + mytest.Suffix()
	sa := mysql.NewLeaseStore(e.db, e.relayDB, a)
	t.Cleanup(func() { _ = sa.Close() })
	if _, err := sa.Census(ctx, &lease.CensusParams{Owner: a, TTL: time.Minute}); err != nil {
		t.Fatal(err)
	}
	wctx, cancel := context.WithTimeout(ctx, 300*time.Millisecond)
	defer cancel()
	if rung, err := sa.Wait(wctx, a, 30*time.Second); err == nil || rung {
		t.Fatalf("a wait whose context ended: rung %v, error %v; want an error", rung, err)
	}
	conn, err := e.db.Conn(ctx)
	if err != nil {
		t.Fatal(err)
	}
	defer conn.Close()
	if _, err := conn.ExecContext(ctx, "SET SESSION lock_wait_timeout = 2"); err != nil {
		t.Fatal(err)
	}
	if _, err := conn.ExecContext(ctx, "ALTER TABLE "+e.relayDB+".replicas COMMENT = 'altered'"); err != nil {
		t.Fatalf("DDL on the replicas table after the wait was given up: %v", err)
	}
}

// TestBellRungByManyAtOnce: a replica handing several shards to one
// successor rings its bell once for each, at once. Two KILLs of one query
// at once can hold each other up on the server for seconds (MariaDB 10.11:
// about one round in twenty stalled 2 s or more), so the ringers take
// turns: every round's wait ends within a second.
func TestBellRungByManyAtOnce(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	a, _, sa, sb := twoReplicas(t)
	if _, err := sa.Wait(ctx, a, 10*time.Millisecond); err != nil { // opens the bell
		t.Fatal(err)
	}
	for round := range 100 {
		woke := make(chan error, 1)
		go func() {
			_, err := sa.Wait(ctx, a, 30*time.Second)
			woke <- err
		}()
		time.Sleep(30 * time.Millisecond) // asleep
		start := time.Now()
		var wg sync.WaitGroup
		for range 3 {
			wg.Go(func() {
				if err := sb.Ring(ctx, a); err != nil {
					t.Errorf("ring: %v", err)
				}
			})
		}
		if err := <-woke; err != nil {
			t.Fatalf("round %d: wait: %v", round, err)
		}
		if took := time.Since(start); took > time.Second {
			t.Fatalf("round %d: rung three times at once, the wait ended %v later", round, took)
		}
		wg.Wait()
		for { // the rings that came after the wait ended
			if rung, err := sa.Wait(ctx, a, 10*time.Millisecond); err != nil || !rung {
				break
			}
		}
	}
}

// twoReplicas registers two replicas (a census each) on a fresh relay
// database: their names and lease stores, closed when t ends.
func twoReplicas(t *testing.T) (a, b string, sa, sb *mysql.LeaseStore) {
	t.Helper()
	e := newEnv(t)
	sfx := mytest.Suffix()
	a, b = "a-"+sfx, "b-"+sfx
	sa = mysql.NewLeaseStore(e.db, e.relayDB, a)
	sb = mysql.NewLeaseStore(e.db, e.relayDB, b)
	t.Cleanup(func() { _ = sa.Close(); _ = sb.Close() })
	for _, s := range []struct {
		st    *mysql.LeaseStore
		owner string
	}{{sa, a}, {sb, b}} {
		if _, err := s.st.Census(context.Background(), &lease.CensusParams{Owner: s.owner, TTL: time.Minute}); err != nil {
			t.Fatal(err)
		}
	}
	return a, b, sa, sb
}
