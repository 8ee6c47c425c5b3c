package leasetest

import (
	"context"
	"fmt"
	"maps"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/outbox-relay/outbox-relay/internal/lease"
)

// testCensus: a census registers its owner and counts, per live replica,
// the listed shards it holds unexpired. Live is a rule of two facts the
// store reads (lease.Live): a replica connected now whose heartbeat is
// unexpired is live; one whose sessions are gone counts while its last
// heartbeat is younger than half the TTL (its connection may have
// blipped), not after; one whose heartbeat expired does not count however
// connected (frozen); one that left does not count.
func testCensus(t *testing.T, h Harness) {
	ctx := context.Background()
	env := h.NewEnv(t, 0)
	a, b, c := env.Owner(t, "a"), env.Owner(t, "b"), env.Owner(t, "c")
	d, e := env.Owner(t, "d"), env.Owner(t, "e")
	shards := []string{"s1", "s2", "s3"}
	census := func(o Owner, ttl time.Duration) map[string]int {
		t.Helper()
		got, err := o.Leases().Census(ctx, ttl, shards)
		if err != nil {
			t.Fatalf("%s's census: %v", o.Name(), err)
		}
		return got
	}
	census(a, time.Minute)
	census(c, time.Minute)
	census(e, 50*time.Millisecond) // its heartbeat expires at once: frozen
	acquire(t, a, "s1", time.Minute, 1, "")
	acquire(t, a, "s2", time.Minute, 1, "")
	acquire(t, a, "elsewhere", time.Minute, 1, "") // not one of the shards counted
	acquire(t, c, "s3", time.Minute, 1, "")
	census(d, 10*time.Second) // its heartbeat is older than half a minute's TTL at once
	time.Sleep(100 * time.Millisecond)
	if got, want := census(b, time.Minute), map[string]int{a.Name(): 2, b.Name(): 0, c.Name(): 1, d.Name(): 0}; !maps.Equal(got, want) {
		t.Fatalf("b's census: %v, want %v", got, want)
	}
	c.Die(t)
	d.Die(t)
	if err := b.Leases().Leave(ctx); err != nil {
		t.Fatal(err)
	}
	if got, want := census(a, time.Minute), map[string]int{a.Name(): 2, c.Name(): 1}; !maps.Equal(got, want) {
		t.Fatalf("a's census after c and d died and b left: %v, want %v (c's heartbeat is fresh, d's is not)", got, want)
	}
}

// testHandOverReserved: a lease handed over names its successor, reserved
// for it for a while, and a census counts it as the successor's meanwhile
// (a giver counting it as nobody's would give the successor more); taking
// it clears the successor.
func testHandOverReserved(t *testing.T, h Harness) {
	ctx := context.Background()
	env := h.NewEnv(t, 0)
	a, b := env.Owner(t, "a"), env.Owner(t, "b")
	census := func(what string) {
		t.Helper()
		got, err := a.Leases().Census(ctx, time.Minute, []string{"s"})
		if err != nil {
			t.Fatal(err)
		}
		if want := map[string]int{a.Name(): 0, b.Name(): 1}; !maps.Equal(got, want) {
			t.Fatalf("a's census %s: %v, want %v", what, got, want)
		}
	}
	if _, err := b.Leases().Census(ctx, time.Minute, nil); err != nil {
		t.Fatal(err)
	}
	la := acquire(t, a, "s", time.Minute, 1, "")
	if err := a.Leases().HandOver(ctx, la, b.Name()); err != nil {
		t.Fatal(err)
	}
	census("once a handed s to b")
	row := func(reserve time.Duration) *lease.Row {
		t.Helper()
		r, err := a.Leases().Row(ctx, "s", reserve)
		if err != nil || r == nil {
			t.Fatalf("read the lease: %+v %v", r, err)
		}
		return r
	}
	if r := row(time.Minute); !r.Expired || !r.Reserved || r.Successor != b.Name() {
		t.Fatalf("handed over: %+v, want expired and reserved for %s", r, b.Name())
	}
	if r := row(0); r.Reserved {
		t.Fatalf("a reservation of no time still holds: %+v", r)
	}
	lb := acquire(t, b, "s", time.Minute, 2, a.Name())
	census("once b took s")
	// a handed it over once its work had ended: its sessions are not
	// ended (they may hold claims of its other shards on the table).
	if len(lb.Unended) != 0 {
		t.Fatalf("the successor is to end %v, want none after a hand-over", lb.Unended)
	}
	if r := row(time.Minute); r.Reserved || r.Successor != "" {
		t.Fatalf("taken by its successor, the lease still names one: %+v", r)
	}
}

// holds records which owner runs the work of each shard, and fails the
// test when two run the same shard's at once.
type holds struct {
	t  *testing.T
	mu sync.Mutex
	by map[string]string // shard -> owner running its work
}

func (h *holds) work(owner, shard string) func(ctx context.Context) {
	return func(ctx context.Context) {
		h.mu.Lock()
		if o := h.by[shard]; o != "" {
			h.t.Errorf("%s runs %s's work while %s does", owner, shard, o)
		}
		h.by[shard] = owner
		h.mu.Unlock()
		<-ctx.Done()
		h.mu.Lock()
		delete(h.by, shard)
		h.mu.Unlock()
	}
}

// counts is how many shards each owner runs.
func (h *holds) counts() map[string]int {
	h.mu.Lock()
	defer h.mu.Unlock()
	out := map[string]int{}
	for _, o := range h.by {
		out[o]++
	}
	return out
}

// await waits until the owners run the shards as want says, or fails
// after d; it returns how long it took.
func (h *holds) await(want map[string]int, d time.Duration, what string) time.Duration {
	h.t.Helper()
	start := time.Now()
	for tick := time.NewTicker(20 * time.Millisecond); ; <-tick.C {
		got := h.counts()
		if maps.Equal(got, want) {
			tick.Stop()
			return time.Since(start)
		}
		if time.Since(start) > d {
			h.t.Fatalf("%s: owners run %v after %v, want %v", what, got, d, want)
		}
	}
}

// replica runs an owner's balancer and a Hold per shard, as a relay
// process does; stop ends them all (a clean leave) and waits.
func replica(t *testing.T, o Owner, env Env, shards []string, ttl time.Duration, h *holds) (stop func()) {
	ctx, cancel := context.WithCancel(context.Background())
	var wg sync.WaitGroup
	b := lease.NewBalancer(o.Leases(), ttl, nil)
	wg.Go(func() { b.Run(ctx) })
	for _, s := range shards {
		wg.Go(func() {
			b.Hold(ctx, lease.HoldOptions{Shard: s, Table: env.Table()}, h.work(o.Name(), s))
		})
	}
	stopped := false
	stop = func() {
		if !stopped {
			stopped = true
			cancel()
			wg.Wait()
		}
	}
	t.Cleanup(stop)
	return stop
}

// testBalance: replicas share the shards, each about its share, taking
// free shards first and then a joining replica's share from the others; a
// replica that leaves hands its shards to the others at once; never two
// run one shard's work at the same time.
func testBalance(t *testing.T, h Harness) {
	env := h.NewEnv(t, 0)
	const ttl = 3 * time.Second
	shards := make([]string, 6)
	for i := range shards {
		shards[i] = fmt.Sprint("s", i)
	}
	rec := &holds{t: t, by: map[string]string{}}
	a, b, c := env.Owner(t, "a"), env.Owner(t, "b"), env.Owner(t, "c")
	replica(t, a, env, shards, ttl, rec)
	rec.await(map[string]int{a.Name(): 6}, 10*time.Second, "a alone")
	replica(t, b, env, shards, ttl, rec)
	rec.await(map[string]int{a.Name(): 3, b.Name(): 3}, 10*time.Second, "b joins")
	stopC := replica(t, c, env, shards, ttl, rec)
	rec.await(map[string]int{a.Name(): 2, b.Name(): 2, c.Name(): 2}, 10*time.Second, "c joins")
	stopC()
	// Without a notification (not every dialect has one) the successors
	// take their shards at their next attempt: a third of the TTL.
	took := rec.await(map[string]int{a.Name(): 3, b.Name(): 3}, ttl, "c leaves")
	t.Logf("c's shards taken %v after it left", took)
}

// testRenewAll: one statement renews an owner's leases still held with
// their terms, and says which; one taken over meanwhile is not renewed.
func testRenewAll(t *testing.T, h Harness) {
	ctx := context.Background()
	env := h.NewEnv(t, 0)
	a, b := env.Owner(t, "a"), env.Owner(t, "b")
	l1 := acquire(t, a, "s1", time.Minute, 1, "")
	l2 := acquire(t, a, "s2", time.Minute, 1, "")
	l3 := acquire(t, a, "s3", time.Minute, 1, "")
	if err := a.Leases().Release(ctx, l2); err != nil {
		t.Fatal(err)
	}
	acquire(t, b, "s2", time.Minute, 2, a.Name())
	env.ExpireAll(t) // s3 too: an expired lease is not renewed, even untaken
	acquire(t, a, "s1", time.Minute, 1, "")
	got, err := a.Leases().RenewAll(ctx, []*lease.Lease{l1, l2, l3}, time.Minute)
	if err != nil {
		t.Fatal(err)
	}
	if want := map[string]bool{"s1": true}; !maps.Equal(got, want) {
		t.Fatalf("renewed %v, want %v", got, want)
	}
	renews(t, a, l1, true)
}

// lines is a log destination safe for concurrent writes.
type lines struct {
	mu sync.Mutex
	b  strings.Builder
}

func (l *lines) Write(p []byte) (int, error) {
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.b.Write(p)
}

func (l *lines) String() string {
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.b.String()
}
