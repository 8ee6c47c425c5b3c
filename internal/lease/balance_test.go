package lease

import (
	"context"
	"fmt"
	"maps"
	"slices"
	"testing"
	"time"
)

func TestShare(t *testing.T) {
	for _, tc := range []struct{ shards, replicas, want int }{
		{12, 3, 4}, {12, 4, 3}, {13, 4, 4}, {1, 3, 1}, {0, 2, 0}, {5, 0, 5},
	} {
		if got := Share(tc.shards, tc.replicas); got != tc.want {
			t.Errorf("Share(%d, %d) = %d, want %d", tc.shards, tc.replicas, got, tc.want)
		}
	}
}

func TestHandOvers(t *testing.T) {
	for _, tc := range []struct {
		name   string
		counts map[string]int
		shards int
		want   []string
	}{
		{"alone keeps all", map[string]int{"a": 12}, 12, nil},
		{"down to the share, spread", map[string]int{"a": 12, "b": 0, "c": 0}, 12, []string{"b", "c", "b", "c", "b", "c", "b", "c"}},
		{"a newcomer gets one from each", map[string]int{"a": 4, "b": 4, "c": 4, "d": 0}, 12, []string{"d"}},
		{"one a round at the share", map[string]int{"a": 4, "b": 4, "c": 4, "d": 1}, 13, []string{"d"}},
		{"a difference of one stays", map[string]int{"a": 4, "b": 3}, 7, nil},
		{"never to a replica that would end above the giver", map[string]int{"a": 2, "b": 1, "c": 1}, 4, nil},
	} {
		t.Run(tc.name, func(t *testing.T) {
			if got := handOvers(tc.counts, "a", tc.shards); !slices.Equal(got, tc.want) {
				t.Fatalf("handOvers(%v) = %v, want %v", tc.counts, got, tc.want)
			}
		})
	}
}

// Every replica decides from the same census at the same time, as replicas
// do: the shares converge within a few rounds, max - min ≤ 1, and no shard
// moves more often than it must (no hot potato).
func TestHandOversConverge(t *testing.T) {
	for _, tc := range []struct {
		shards int
		start  []int
	}{
		{12, []int{12, 0, 0}},
		{12, []int{4, 4, 4, 0}},
		{13, []int{4, 4, 4, 1}},
		{100, []int{100, 0, 0, 0, 0, 0, 0}},
		{91, []int{10, 10, 10, 10, 10, 10, 10, 10, 10, 1}},
		{7, []int{0, 0, 7}},
	} {
		t.Run(fmt.Sprint(tc.shards, tc.start), func(t *testing.T) {
			counts := map[string]int{}
			for i, n := range tc.start {
				counts[fmt.Sprintf("r%02d", i)] = n
			}
			moves, need := 0, 0
			share := Share(tc.shards, len(counts))
			for _, n := range counts {
				need += max(0, n-share)
			}
			for round := 0; ; round++ {
				if round == 6 {
					t.Fatalf("not balanced after %d rounds: %v", round, counts)
				}
				next := maps.Clone(counts)
				for _, me := range slices.Sorted(maps.Keys(counts)) {
					for _, to := range handOvers(counts, me, tc.shards) {
						next[me]--
						next[to]++
						moves++
					}
				}
				if maps.Equal(next, counts) {
					break
				}
				counts = next
			}
			lo, hi := slices.Min(slices.Collect(maps.Values(counts))), slices.Max(slices.Collect(maps.Values(counts)))
			if hi-lo > 1 {
				t.Fatalf("settled unbalanced: %v", counts)
			}
			if moves > need+len(counts) {
				t.Fatalf("%d moves for a surplus of %d over %d replicas: %v", moves, need, len(counts), counts)
			}
		})
	}
}

func TestMayAcquire(t *testing.T) {
	b := NewBalancer(New(nil, "me"), 3*time.Second, nil)
	b.join("s1")
	b.join("s2")
	b.join("s3")
	free := &Row{Owner: "other", Term: 1, Expired: true}
	if b.mayAcquire(nil, "me") || b.mayAcquire(free, "me") {
		t.Fatal("took a shard before the first census")
	}
	b.counts = map[string]int{"me": 0, "other": 0} // a share of 2
	for _, tc := range []struct {
		name string
		row  *Row
		held int
		want bool
	}{
		{"a new shard within the share", nil, 1, true},
		{"a new shard beyond the share", nil, 2, false},
		{"an expired one within the share", free, 0, true},
		{"an expired one beyond the share", free, 2, false},
		{"its own, beyond the share", &Row{Owner: "me", Term: 3}, 3, true},
		{"handed to it, beyond the share", &Row{Owner: "other", Expired: true, Reserved: true, Successor: "me"}, 3, true},
		{"handed to another, within the share", &Row{Owner: "third", Expired: true, Reserved: true, Successor: "other"}, 0, false},
		{"handed to a replica gone since, within the share", &Row{Owner: "other", Expired: true, Reserved: true, Successor: "third"}, 0, true},
		{"handed to a replica gone since, beyond the share", &Row{Owner: "other", Expired: true, Reserved: true, Successor: "third"}, 2, false},
		{"its own, handed to another", &Row{Owner: "me", Expired: true, Reserved: true, Successor: "other"}, 0, false},
		{"handed to another long ago", &Row{Owner: "other", Expired: true, Successor: "third"}, 0, true},
	} {
		t.Run(tc.name, func(t *testing.T) {
			b.held = map[string]*holding{}
			for i := range tc.held {
				b.held[fmt.Sprint("h", i)] = nil
			}
			if got := b.mayAcquire(tc.row, "me"); got != tc.want {
				t.Fatalf("mayAcquire(%+v) holding %d = %v, want %v", tc.row, tc.held, got, tc.want)
			}
		})
	}
}

// TestLive: the rule of a replica's liveness in a census. A replica whose
// sessions are gone for a moment (its connection blipped) while its
// heartbeat is fresh is live; one without a session whose last heartbeat
// is older than the trust window (half the TTL) is gone (killed); one with a
// session whose heartbeat has expired is gone too (frozen or cut off: its
// sessions may linger on the server).
func TestLive(t *testing.T) {
	const ttl = 15 * time.Second
	for _, tc := range []struct {
		name    string
		left    time.Duration
		session bool
		want    bool
	}{
		{"connected, heartbeat fresh", 12 * time.Second, true, true},
		{"connected, heartbeat old but unexpired", time.Second, true, true},
		{"connected, heartbeat expired", -time.Second, true, false},
		{"not connected, heartbeat 2s old: a blip", 13 * time.Second, false, true},
		{"not connected, heartbeat just within the trust window", 7501 * time.Millisecond, false, true},
		{"not connected, heartbeat older than the trust window", 7 * time.Second, false, false},
		{"not connected, heartbeat expired", -time.Second, false, false},
	} {
		t.Run(tc.name, func(t *testing.T) {
			if got := Live(Replica{Owner: "r", Left: tc.left, Session: tc.session}, ttl); got != tc.want {
				t.Fatalf("Live(left %v, session %v) = %v, want %v", tc.left, tc.session, got, tc.want)
			}
		})
	}
}

// census is a Store whose census reads the given replicas.
type census struct {
	Store
	replicas []Replica
}

func (c census) Census(context.Context, *CensusParams) ([]Replica, error) { return c.replicas, nil }

// TestCensusCountsTheLive: a census counts the live replicas, with their
// holds, and always the census's own owner, and says when the first of
// those counted would drop out.
func TestCensusCountsTheLive(t *testing.T) {
	const ttl = 15 * time.Second
	l := New(census{replicas: []Replica{
		{Owner: "me", Left: -time.Second, Holds: 2}, // however the store sees it
		{Owner: "blipped", Left: 14 * time.Second, Holds: 3},
		{Owner: "killed", Left: 5 * time.Second, Holds: 1},
		{Owner: "frozen", Left: -time.Second, Session: true, Holds: 4},
		{Owner: "up", Left: 10 * time.Second, Session: true},
	}}, "me")
	got, next, err := l.census(context.Background(), ttl, nil)
	if err != nil {
		t.Fatal(err)
	}
	if want := map[string]int{"me": 2, "blipped": 3, "up": 0}; !maps.Equal(got, want) {
		t.Fatalf("census %v, want %v", got, want)
	}
	// The blipped replica drops out once its last heartbeat is half a TTL
	// old, unless it beats again or reconnects: the balancer counts again
	// then.
	if want := 14*time.Second - ttl/2; next != want {
		t.Fatalf("next count in %v, want %v", next, want)
	}
}
