package sourcetest

import (
	"context"
	"slices"
	"testing"
	"time"

	"github.com/outbox-relay/outbox-relay/internal/source"
)

// retryDelay is the backoff the suite schedules: long enough that an early
// claim is clearly early, short enough to wait for.
const retryDelay = 1500 * time.Millisecond

// dueWithin bounds how long after its time a retried row must be claimable.
const dueWithin = retryDelay + 5*time.Second

func (s *suite) testCompleteOutcome(t *testing.T) {
	tbl, src := s.newTable(t)
	id := tbl.Insert(t, rows(4, 300)...)
	st := tbl.Open(t, Options{Source: src, Ordering: true})
	b := claim(t, st, 10)
	if got := ids(b); !slices.Equal(got, id) {
		t.Fatalf("claimed %v, want %v", got, id)
	}
	const reason = "message too large: 2000000 bytes, the sink accepts at most 1000000"
	at := time.Now().Add(retryDelay)
	complete(t, b, source.Outcome{
		Published: []int{0},
		Retry:     []source.Retry{{Index: 1, Attempts: 1, At: at, Err: "broker down"}},
		Dead:      []source.Dead{{Index: 2, Attempts: 3, Reason: reason, PayloadIsJSON: true, Exhausted: true}},
		// row 3 is in no list: left pending untouched
	})

	// Published.
	p := tbl.State(t, id[0])
	switch {
	case s.exp.deletes && p.Exists:
		t.Errorf("published row %s still there: %+v", id[0], p)
	case !s.exp.deletes && (!p.Published || p.Pending || p.Failed):
		t.Errorf("published row %s: %+v, want marked published and not pending", id[0], p)
	}
	// Retried.
	r := tbl.State(t, id[1])
	if !r.Exists || !r.Pending || r.Published || r.Failed {
		t.Errorf("retried row %s: %+v, want pending", id[1], r)
	}
	if s.exp.retryCount && r.Attempts != 1 {
		t.Errorf("retried row's retry counter = %d, want 1", r.Attempts)
	}
	if s.exp.errorColumn && r.Error != "broker down" {
		t.Errorf("retried row's error = %q, want the last error", r.Error)
	}
	// Dead.
	deadAttempts := 3
	if s.caps.AttemptsCountClaims {
		deadAttempts = 1 // claimed once
	}
	d := tbl.State(t, id[2])
	switch {
	case s.exp.deletes:
		if d.Exists {
			t.Errorf("dead row %s still there: %+v", id[2], d)
		}
	default:
		if !d.Exists || d.Pending {
			t.Errorf("dead row %s: %+v, want out of the pending set", id[2], d)
		}
		if s.exp.marksFailed && !d.Failed {
			t.Errorf("dead row %s: %+v, want marked failed", id[2], d)
		}
		if !s.exp.deadMarkedOK && d.Published {
			t.Errorf("dead row %s: %+v, marked published", id[2], d)
		}
		if s.exp.errorColumn && d.Error != reason {
			t.Errorf("dead row's error = %q, want %q", d.Error, reason)
		}
		if s.exp.retryCount && d.Attempts != deadAttempts {
			t.Errorf("dead row's retry counter = %d, want %d", d.Attempts, deadAttempts)
		}
	}
	dl := tbl.DeadLetters(t, id[2])
	if len(dl) != 1 || dl[0].Reason != reason || dl[0].Attempts != deadAttempts {
		t.Errorf("dead letters of %s: %+v, want one with the reason and %d attempts", id[2], dl, deadAttempts)
	}
	for _, other := range []string{id[0], id[1], id[3]} {
		if dl := tbl.DeadLetters(t, other); len(dl) != 0 {
			t.Errorf("row %s has dead letters %+v", other, dl)
		}
	}
	// Untouched.
	if u := tbl.State(t, id[3]); !u.Pending || u.Attempts != s.claimAttempts(1) || u.Error != "" || u.Published || u.Failed {
		t.Errorf("row in no list: %+v, want pending and untouched", u)
	}

	// The retried row is not due yet; the untouched one is.
	b2 := claim(t, tbl.Open(t, Options{Source: src, Ordering: true}), 10)
	if got := ids(b2); !slices.Equal(got, []string{id[3]}) {
		release(t, b2)
		t.Fatalf("claim right after completion = %v, want only %s (%s backs off)", got, id[3], id[1])
	}
	s.giveBack(t, b2)

	// Once due, a new store (a restarted relay) claims it, attempts kept.
	fresh := tbl.Open(t, Options{Source: src, Ordering: true})
	b3 := s.waitClaim(t, fresh, 10, []string{id[1], id[3]}, dueWithin)
	if early := time.Until(at); early > 100*time.Millisecond {
		t.Errorf("retried row claimed %s before its time", early)
	}
	i1, i3 := index(t, b3, id[1]), index(t, b3, id[3])
	if a := b3.Rows()[i1].Attempts; a != 1 {
		t.Errorf("retried row claimed with %d attempts, want 1", a)
	}
	complete(t, b3, source.Outcome{
		Published: []int{i3},
		Retry:     []source.Retry{{Index: i1, Attempts: 2, At: time.Now().Add(time.Hour), Err: "broker still down"}},
	})
	if r := tbl.State(t, id[1]); s.exp.retryCount && r.Attempts != 2 {
		t.Errorf("retry counter after a second retry = %d, want 2", r.Attempts)
	}
	g, err := fresh.RecordStats(context.Background(), source.Stats{})
	if err != nil {
		t.Fatal(err)
	}
	if g.Backlog.Pending != 1 || g.DeadLetters != 1 {
		t.Errorf("gauges %+v, want 1 pending (the retried row) and 1 dead letter", g)
	}
}

func (s *suite) testPerKeyOrder(t *testing.T) {
	tbl, src := s.newTable(t)
	a, b := key(400), key(401)
	id := tbl.Insert(t,
		Row{Topic: "sourcetest.events", Key: a, Payload: `{"a": 1}`},
		Row{Topic: "sourcetest.events", Key: b, Payload: `{"b": 1}`},
		Row{Topic: "sourcetest.events", Key: a, Payload: `{"a": 2}`},
		Row{Topic: "sourcetest.events", Key: b, Payload: `{"b": 2}`},
	)
	st := tbl.Open(t, Options{Source: src, Ordering: true})
	first := claim(t, st, 10)
	want, wantUnordered, wantDue := id, []string{id[2], id[3]}, []string{id[0], id[2], id[3]}
	if s.caps.OneInFlightPerKey {
		// A key's next row waits for its previous row's outcome, and that
		// holds with ordering off too.
		want, wantUnordered, wantDue = id[:2], id[3:], []string{id[0], id[3]}
	}
	if got := ids(first); !slices.Equal(got, want) {
		t.Fatalf("claimed %v, want %v", got, want)
	}
	// While a1 and b1 are in flight, a2 and b2 wait for them.
	if o := claim(t, s.beside(t, tbl, st, Options{Source: src, Ordering: true}), 10); o != nil {
		release(t, o)
		t.Fatalf("claimed %v while the first rows of their keys are in flight", ids(o))
	}
	// a1 fails and backs off; b1 is published; a2 and b2 were deferred.
	complete(t, first, source.Outcome{
		Published: []int{1},
		Retry:     []source.Retry{{Index: 0, Attempts: 1, At: time.Now().Add(retryDelay), Err: "timeout"}},
	})
	ordered := tbl.Open(t, Options{Source: src, Ordering: true})
	got := claim(t, ordered, 10)
	if ids := ids(got); !slices.Equal(ids, []string{id[3]}) {
		release(t, got)
		t.Fatalf("with ordering on, claim = %v; want only %s: key a backs off, so a2 waits while key b flows", ids, id[3])
	}
	s.giveBack(t, got)
	unordered := claim(t, tbl.Open(t, Options{Source: src, Ordering: false}), 10)
	if ids := ids(unordered); !slices.Equal(ids, wantUnordered) {
		release(t, unordered)
		t.Fatalf("with ordering off, claim = %v, want %v", ids, wantUnordered)
	}
	s.giveBack(t, unordered)
	// Once a1 is due, it comes first, then a2.
	release(t, s.waitClaim(t, ordered, 10, wantDue, dueWithin))
}

func (s *suite) testRecordStats(t *testing.T) {
	tbl, src := s.newTable(t)
	st := tbl.Open(t, Options{Source: src})
	ctx := context.Background()
	g, err := st.RecordStats(ctx, source.Stats{})
	if err != nil {
		t.Fatal(err)
	}
	if g.Backlog.Pending != 0 || g.DeadLetters != 0 {
		t.Fatalf("gauges on an empty table: %+v", g)
	}
	tbl.Insert(t, rows(3, 500)...)
	if g, err = st.RecordStats(ctx, source.Stats{Published: 2, Retried: 1, DeadLettered: 1, LastPublishedID: "e-1"}); err != nil {
		t.Fatal(err)
	}
	if g.Backlog.Pending != 3 || g.DeadLetters != 0 {
		t.Errorf("gauges with 3 pending rows: %+v", g)
	}
	if _, err = tbl.Open(t, Options{Source: src}).RecordStats(ctx, source.Stats{Published: 3, LastPublishedID: "e-2"}); err != nil {
		t.Fatal(err)
	}
	want := source.Stats{Published: 5, Retried: 1, DeadLettered: 1, LastPublishedID: "e-2"}
	if got := tbl.Totals(t, src); got != want {
		t.Errorf("totals %+v, want %+v (counters add up)", got, want)
	}
	b := claim(t, st, 1)
	complete(t, b, source.Outcome{Dead: []source.Dead{{Index: 0, Attempts: 1, Reason: "invalid payload", PayloadIsJSON: true}}})
	if g, err = st.RecordStats(ctx, source.Stats{}); err != nil {
		t.Fatal(err)
	}
	if g.Backlog.Pending != 2 || g.DeadLetters != 1 {
		t.Errorf("gauges after one dead letter: %+v, want 2 pending and 1 dead letter", g)
	}
	if got := tbl.Totals(t, src); got != want {
		t.Errorf("totals after adding nothing: %+v, want %+v (the last published id kept)", got, want)
	}
	if other := tbl.Totals(t, src+"_other"); other != (source.Stats{}) {
		t.Errorf("another source's totals: %+v", other)
	}
}
