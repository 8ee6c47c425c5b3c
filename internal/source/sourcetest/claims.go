package sourcetest

import (
	"context"
	"regexp"
	"slices"
	"testing"
	"time"

	"github.com/outbox-relay/outbox-relay/internal/source"
)

// takeBack bounds how long a dead claim's rows may take to be claimable.
const takeBack = 10 * time.Second

// assertPending checks that rows are still pending and unpublished.
func assertPending(t *testing.T, tbl Table, ids []string) {
	t.Helper()
	for _, id := range ids {
		if st := tbl.State(t, id); !st.Pending || st.Published || st.Failed {
			t.Errorf("row %s: %+v, want pending", id, st)
		}
	}
}

// completeFails checks that completing a claim that died fails and changes
// nothing.
func completeFails(t *testing.T, tbl Table, b source.Batch) {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	idx := make([]int, len(b.Rows()))
	for i := range idx {
		idx[i] = i
	}
	if err := b.Complete(ctx, source.Outcome{Published: idx}); err == nil {
		t.Fatal("completing a claim whose connection died succeeded")
	}
	assertPending(t, tbl, ids(b))
}

func (s *suite) testKilledClaim(t *testing.T) {
	tbl, src := s.newTable(t)
	id := tbl.Insert(t, rows(3, 600)...)
	a := tbl.Open(t, Options{Source: src})
	b := claim(t, a, 10)
	if got := ids(b); !slices.Equal(got, id) {
		t.Fatalf("claimed %v, want %v", got, id)
	}
	a.Kill(t)
	if s.caps.ReleaseKeepsClaim {
		// The claim was committed: its rows stay claimed until the
		// reaper takes them back, which a relay's reaper does after its
		// timeout.
		s.assertHeld(t, tbl, tbl.Open(t, Options{Source: src}), id)
		s.reap(t, tbl, 0)
	}
	completeFails(t, tbl, b)
	s.giveBack(t, s.waitClaim(t, tbl.Open(t, Options{Source: src}), 10, id, takeBack))
	assertPending(t, tbl, id)
}

func (s *suite) testIdleClaimTimeout(t *testing.T) {
	tbl, src := s.newTable(t)
	id := tbl.Insert(t, rows(2, 700)...)
	const timeout = time.Second
	if s.caps.OneClaimer {
		s.idleClaimOfOneClaimer(t, tbl, src, id, timeout)
		return
	}
	b := claim(t, tbl.Open(t, Options{Source: src, ClaimTimeout: timeout}), 10)
	claimed := time.Now()
	if got := ids(b); !slices.Equal(got, id) {
		t.Fatalf("claimed %v, want %v", got, id)
	}
	other := tbl.Open(t, Options{Source: src})
	if o := claim(t, other, 10); o != nil {
		release(t, o)
		t.Fatalf("a held claim's rows were claimed at once: %v", ids(o))
	}
	// Where only a reaper takes claims back, it runs with the claim
	// timeout as its own.
	s.giveBack(t, s.waitTakenBack(t, tbl, other, 10, id, takeBack, timeout))
	if held := time.Since(claimed); held < timeout-100*time.Millisecond {
		t.Errorf("an idle claim ended after %s, before its timeout %s", held, timeout)
	}
	completeFails(t, tbl, b)
}

var uuidPattern = regexp.MustCompile(`^[0-9a-f]{8}-[0-9a-f]{4}-[0-9a-f]{4}-[0-9a-f]{4}-[0-9a-f]{12}$`)

func (s *suite) testForeignClaims(t *testing.T) {
	tbl, src := s.newTable(t)
	id := tbl.Insert(t, rows(3, 800)...)
	const timeout = 2 * time.Second
	now := time.Now()
	tbl.ClaimElsewhere(t, id[0], now.Add(-time.Hour)) // its relay died long ago
	tbl.ClaimElsewhere(t, id[1], now)                 // in flight elsewhere
	st := tbl.Open(t, Options{Source: src, ClaimTimeout: timeout})
	b := claim(t, st, 10)
	if got := ids(b); !slices.Equal(got, []string{id[0], id[2]}) {
		release(t, b)
		t.Fatalf("claimed %v, want the stale claim's row and the free one %v", got, []string{id[0], id[2]})
	}
	before := time.Now()
	publishAll(t, b)
	after := time.Now()
	r0, r2 := tbl.State(t, id[0]), tbl.State(t, id[2])
	for _, r := range []RowState{r0, r2} {
		if !r.Published || r.Pending {
			t.Errorf("acknowledged row %+v, want published", r)
		}
		if !uuidPattern.MatchString(r.BatchID) || r.BatchID != r0.BatchID {
			t.Errorf("acknowledged rows' batch ids %q and %q, want one UUID per batch", r0.BatchID, r.BatchID)
		}
		// The claim time is the transaction's start, before Complete.
		if r.ClaimedAt.Before(before.Add(-5*time.Second)) || r.ClaimedAt.After(after.Add(time.Second)) {
			t.Errorf("claim time %s, want about %s", r.ClaimedAt, before)
		}
	}
	// The other relay's claim is taken back once it is older than the timeout.
	b2 := waitClaim(t, st, 10, []string{id[1]}, takeBack)
	defer release(t, b2)
	if early := time.Until(now.Add(timeout)); early > 100*time.Millisecond {
		t.Errorf("a live claim of another relay was taken %s before the claim timeout", early)
	}
}

// idleClaimOfOneClaimer is testIdleClaimTimeout for a store of one claimer
// per source, which holds its rows apart from no other store: a claim
// idle for less than its timeout still completes, one idle for longer no
// longer can, and a new claimer then takes its rows.
func (s *suite) idleClaimOfOneClaimer(t *testing.T, tbl Table, src string, id []string, timeout time.Duration) {
	st := tbl.Open(t, Options{Source: src, ClaimTimeout: timeout})
	b := claim(t, st, 10)
	if got := ids(b); !slices.Equal(got, id) {
		t.Fatalf("claimed %v, want %v", got, id)
	}
	time.Sleep(timeout / 2)
	release(t, b) // its transaction is still open: a rollback succeeds
	b = claim(t, st, 10)
	if got := ids(b); !slices.Equal(got, id) {
		t.Fatalf("claimed %v after a release, want %v", got, id)
	}
	time.Sleep(timeout + time.Second)
	completeFails(t, tbl, b)
	s.giveBack(t, s.waitClaim(t, tbl.Open(t, Options{Source: src}), 10, id, takeBack))
}
