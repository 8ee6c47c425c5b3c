package lease

import (
	"context"
	"log/slog"
	"slices"
	"strconv"
	"testing"
)

func TestNextUnended(t *testing.T) {
	t.Parallel()
	var many []string
	for i := range 20 {
		many = append(many, "o"+strconv.Itoa(i))
	}
	for _, tc := range []struct {
		name        string
		unended     []string
		prev, owner string
		want        []string
	}{
		{"first takeover", nil, "a", "b", []string{"a"}},
		{"accumulates", []string{"a"}, "b", "c", []string{"a", "b"}},
		{"never the new owner", []string{"a", "c"}, "b", "c", []string{"a", "b"}},
		{"each once, newest last", []string{"a", "b"}, "a", "c", []string{"a", "b"}},
		{"no previous owner", []string{"a", "", "a"}, "", "c", []string{"a"}},
		{"bounded, oldest dropped", many, "p", "c", append(slices.Clone(many[5:]), "p")},
	} {
		t.Run(tc.name, func(t *testing.T) {
			got := NextUnended(tc.unended, tc.prev, tc.owner)
			if !slices.Equal(got, tc.want) {
				t.Fatalf("NextUnended(%q, %q, %q) = %q, want %q", tc.unended, tc.prev, tc.owner, got, tc.want)
			}
			if back := SplitOwners(JoinOwners(got)); !slices.Equal(back, got) && len(got) > 0 {
				t.Fatalf("owners stored as %q read back as %q", JoinOwners(got), back)
			}
		})
	}
}

func TestDecide(t *testing.T) {
	t.Parallel()
	for _, tc := range []struct {
		name string
		row  *Row
		want step
	}{
		{"no row", nil, stepInsert},
		{"own, live", &Row{Owner: "me", Term: 3}, stepKeep},
		{"own, expired", &Row{Owner: "me", Term: 3, Expired: true}, stepKeep},
		{"another's, expired", &Row{Owner: "x", Term: 3, Expired: true}, stepTake},
		{"another's, live", &Row{Owner: "x", Term: 3}, stepWait},
	} {
		if got := decide(tc.row, "me"); got != tc.want {
			t.Errorf("%s: decide = %d, want %d", tc.name, got, tc.want)
		}
	}
}

// endings is a Store that records what a new holder asked of it.
type endings struct {
	Store  // nil: the hand-over needs only the methods below
	ended  []string
	marked int
}

func (e *endings) EndOwner(_ context.Context, p *EndOwnerParams) error {
	e.ended = append(e.ended, p.Owner)
	return nil
}
func (e *endings) Ended(context.Context, *EndedParams) error { e.marked++; return nil }

// TestNewHolderEndsEveryUnendedOwner: a lease taken over from b, which
// had not ended a's claims before losing it, makes the new holder end a's
// and b's claims before it claims, and only then record them ended.
func TestNewHolderEndsEveryUnendedOwner(t *testing.T) {
	t.Parallel()
	var e endings
	settled := 0
	l := New(&e, "c")
	ls := &Lease{Shard: "s", Owner: "c", Term: 3, PreviousOwner: "b", Unended: []string{"a", "b"}}
	o := HoldOptions{Shard: "s", Table: "t", Settle: func(context.Context) error {
		if len(e.ended) != 2 || e.marked != 0 {
			t.Errorf("settled after ending %q and recording %d times", e.ended, e.marked)
		}
		settled++
		return nil
	}}
	l.handOver(context.Background(), o, ls, slog.New(slog.DiscardHandler))
	if !slices.Equal(e.ended, []string{"a", "b"}) {
		t.Fatalf("ended the claims of %q, want a's and b's", e.ended)
	}
	if settled != 1 {
		t.Fatalf("settled %d times, want once", settled)
	}
	if e.marked != 1 {
		t.Fatalf("recorded the owners ended %d times, want once", e.marked)
	}
}
