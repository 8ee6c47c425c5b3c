package sourcetest

import (
	"slices"
	"testing"
	"time"

	"github.com/outbox-relay/outbox-relay/internal/source"
)

// testHeldHead checks that a key backing off with more rows at the head of
// the order than a claim considers holds only itself: a claim still takes
// the keys behind it. (A claim reads a bounded window of the pending rows;
// rows that cannot be claimed must not fill it.)
func (s *suite) testHeldHead(t *testing.T) {
	tbl, src := s.newTable(t)
	const limit, held = 2, 20 // far more than the window of a claim of 2
	x, y := key(900), key(901)
	var rs []Row
	for range held {
		rs = append(rs, Row{Topic: "sourcetest.events", Key: x, Payload: `{"x": 1}`})
	}
	for range 3 {
		rs = append(rs, Row{Topic: "sourcetest.events", Key: y, Payload: `{"y": 1}`})
	}
	id := tbl.Insert(t, rs...)
	st := tbl.Open(t, Options{Source: src, Ordering: true})
	first := claim(t, st, 1)
	if got := ids(first); !slices.Equal(got, id[:1]) {
		release(t, first)
		t.Fatalf("claimed %v, want %v", got, id[:1])
	}
	complete(t, first, source.Outcome{Retry: []source.Retry{{Index: 0, Attempts: 1, At: time.Now().Add(time.Hour), Err: "down"}}})
	b := claim(t, st, limit)
	if b == nil {
		t.Fatalf("nothing claimed: %d rows of a key backing off kept every other key waiting", held)
	}
	defer release(t, b)
	want := id[held : held+limit]
	if s.caps.OneInFlightPerKey {
		want = want[:1] // y's second row waits for its first's outcome
	}
	if got := ids(b); !slices.Equal(got, want) {
		t.Fatalf("claimed %v, want key y's first rows %v (key x backs off)", got, want)
	}
}

// testForeignClaimBeyondWindow checks that a claim goes no further than the
// rows it considered: past them, a row another relay claimed would not be
// seen, and a later row of its key would be taken before it.
func (s *suite) testForeignClaimBeyondWindow(t *testing.T) {
	tbl, src := s.newTable(t)
	a, b := key(910), key(911)
	const n = 8 // key a's rows: more than the window of a claim of 1
	var rs []Row
	for range n {
		rs = append(rs, Row{Topic: "sourcetest.events", Key: a, Payload: `{"a": 1}`})
	}
	rs = append(rs, Row{Topic: "sourcetest.events", Key: b, Payload: `{"b": 1}`}, Row{Topic: "sourcetest.events", Key: b, Payload: `{"b": 2}`})
	id := tbl.Insert(t, rs...)
	tbl.ClaimElsewhere(t, id[n], time.Now()) // key b's first row, in flight elsewhere
	hold := claim(t, tbl.Open(t, Options{Source: src, Ordering: true}), n)
	if got := ids(hold); !slices.Equal(got, id[:n]) {
		release(t, hold)
		t.Fatalf("claimed %v, want key a's rows %v", got, id[:n])
	}
	defer release(t, hold)
	other := claim(t, tbl.Open(t, Options{Source: src, Ordering: true}), 1)
	if other != nil {
		defer release(t, other)
		if slices.Contains(ids(other), id[n+1]) {
			t.Fatalf("claimed %v: key b's second row, while another relay holds its first", ids(other))
		}
	}
}
