package bench

import (
	"slices"
	"testing"
	"time"
)

func TestOwnerPID(t *testing.T) {
	t.Parallel()
	for owner, want := range map[string]int{
		"relay-7f9c/4242/0a1b": 4242,
		"a/b/c/17/ffff":        17, // a host name is not expected to hold a slash, but the pid is still found
		"host/notapid/0a1b":    0,
		"host/4242":            0,
		"":                     0,
	} {
		if got := ownerPID(owner); got != want {
			t.Errorf("ownerPID(%q) = %d, want %d", owner, got, want)
		}
	}
}

func held(db, shard string, pid int, at time.Time) heldLease {
	return heldLease{shardKey: shardKey{db, shard}, pid: pid, acquired: at}
}

func TestBalanced(t *testing.T) {
	t.Parallel()
	at := time.Now()
	two := []string{"a", "b"}
	for _, c := range []struct {
		name string
		ls   []heldLease
		dbs  []string
		per  int
		pids []int
		want bool
	}{
		{"3 and 3", []heldLease{held("a", "1", 1, at), held("a", "2", 1, at), held("a", "3", 2, at), held("a", "4", 2, at)}, []string{"a"}, 4, []int{1, 2}, true},
		{"3 and 1", []heldLease{held("a", "1", 1, at), held("a", "2", 1, at), held("a", "3", 1, at), held("a", "4", 2, at)}, []string{"a"}, 4, []int{1, 2}, false},
		{"one not held", []heldLease{held("a", "1", 1, at), held("a", "2", 2, at), held("a", "3", 2, at)}, []string{"a"}, 4, []int{1, 2}, false},
		{"a replica with none", []heldLease{held("a", "1", 1, at), held("a", "2", 2, at)}, []string{"a"}, 2, []int{1, 2, 3}, true},
		{"held by one gone", []heldLease{held("a", "1", 1, at), held("a", "2", 9, at)}, []string{"a"}, 2, []int{1, 2}, false},
		{"each database even", []heldLease{held("a", "1", 1, at), held("a", "2", 2, at), held("b", "1", 2, at), held("b", "2", 1, at)}, two, 2, []int{1, 2}, true},
		{"a database uneven", []heldLease{held("a", "1", 1, at), held("a", "2", 2, at), held("b", "1", 2, at), held("b", "2", 2, at)}, two, 2, []int{1, 2}, false},
		{"a database unheld", []heldLease{held("a", "1", 1, at), held("a", "2", 2, at)}, two, 2, []int{1, 2}, false},
	} {
		if got := balanced(c.ls, c.dbs, c.per, c.pids); got != c.want {
			t.Errorf("%s: balanced = %v, want %v", c.name, got, c.want)
		}
	}
}

func TestMostHeld(t *testing.T) {
	t.Parallel()
	at := time.Now()
	ls := []heldLease{held("a", "1", 7, at), held("a", "2", 5, at), held("b", "1", 7, at), held("b", "2", 5, at), held("b", "3", 3, at)}
	pid, shards := mostHeld(ls)
	if pid != 5 || !slices.Equal(shards, []shardKey{{"a", "2"}, {"b", "2"}}) {
		t.Errorf("mostHeld = %d %v, want pid 5 (of 5 and 7, both holding 2, the lower) with a/2, b/2", pid, shards)
	}
	if pid, shards := mostHeld(nil); pid != 0 || shards != nil {
		t.Errorf("mostHeld(none) = %d %v", pid, shards)
	}
}

func TestTakenOver(t *testing.T) {
	t.Parallel()
	t0 := time.Now()
	mine := []shardKey{{"a", "1"}, {"b", "1"}}
	for _, c := range []struct {
		name string
		ls   []heldLease
		last time.Time
		ok   bool
	}{
		{"still mine", []heldLease{held("a", "1", 5, t0), held("b", "1", 6, t0.Add(time.Millisecond))}, time.Time{}, false},
		{"one free", []heldLease{held("b", "1", 6, t0.Add(time.Millisecond))}, time.Time{}, false},
		{"both taken", []heldLease{held("a", "1", 7, t0.Add(3*time.Millisecond)), held("b", "1", 6, t0.Add(time.Millisecond)), held("a", "2", 5, t0.Add(time.Hour))},
			t0.Add(3 * time.Millisecond), true},
	} {
		last, ok := takenOver(c.ls, mine, 5)
		if ok != c.ok || !last.Equal(c.last) {
			t.Errorf("%s: takenOver = %v %v, want %v %v", c.name, last, ok, c.last, c.ok)
		}
	}
}

func TestReplicaEnv(t *testing.T) {
	t.Parallel()
	env := []string{"PATH=/bin", "OUTBOX_RELAY_LEASE_TTL=1s", "DATABASE_URL=postgres://x", "DATABASE_URLS=kept", "HOME=/root"}
	got := replicaEnv(env)
	if want := []string{"PATH=/bin", "DATABASE_URLS=kept", "HOME=/root"}; !slices.Equal(got, want) {
		t.Errorf("replicaEnv = %v, want %v", got, want)
	}
	if len(env) != 5 {
		t.Errorf("replicaEnv changed its argument: %v", env)
	}
}
