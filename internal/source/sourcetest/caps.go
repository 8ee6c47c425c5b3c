package sourcetest

import (
	"slices"
	"testing"
	"time"

	"github.com/outbox-relay/outbox-relay/internal/source"
)

// Capabilities declare, up front, what a store can or cannot do where stores
// differ by design. The suite runs every case that applies with the same
// assertions; a case that cannot apply is skipped by the capability that
// rules it out, and where a store promises something else (what "pending"
// means once a row is claimed, what gives a claim's rows back) the case
// checks that promise instead, under the capability's name.
//
// The zero value is a store that holds its claims in a database
// transaction, as the postgres and mysql stores do.
type Capabilities struct {
	// OneInFlightPerKey: a claim takes a key's rows one at a time, the next
	// only once the previous has an outcome, whatever Options.Ordering:
	// per-key order cannot be turned off.
	OneInFlightPerKey bool
	// ReleaseKeepsClaim: Batch.Release records nothing and the rows stay
	// claimed; the rows of a released, killed or idle claim come back only
	// through the store's reaper (the Table implements Reaper). A relay
	// gives rows back unsent by completing the batch with them in no list.
	ReleaseKeepsClaim bool
	// RemovedAtClaim: a claim commits at once and takes its rows out of the
	// table: until their outcome they exist (State.Exists) but are neither
	// pending nor settled.
	RemovedAtClaim bool
	// AttemptsCountClaims: every claim is an attempt. A row's attempt
	// counter and its dead letter count the claims made (Retry.Attempts and
	// Dead.Attempts are not stored), and a row completed in no list comes
	// back as a spent attempt, due at once.
	AttemptsCountClaims bool
	// KeyRequired: every row has a key; the suite inserts no keyless rows.
	KeyRequired bool
	// ClaimsInDueOrder: a claim takes rows in the order they fell due, and
	// the layout's order_by orders only a key's rows: a retried row comes
	// after the rows that fell due before it.
	ClaimsInDueOrder bool
	// OwnClaimOrder: the store claims in an order of its own that no
	// priority (Options.Priority) changes.
	OwnClaimOrder bool
	// WholeSourceOnly: the store claims a whole source; it cannot be
	// opened on a bucket of it (Options.Bucket).
	WholeSourceOnly bool
	// OneClaimer: the store reads its source from one position, which it
	// keeps in memory ahead of its batches in flight and records as they
	// complete, each over the position it was claimed from: one claimer
	// per source reads it (the lease holder). A second store opened on the
	// source starts from the position recorded, so beside batches another
	// holds it hands their rows out again; of two batches claimed from one
	// recorded position only the first to complete records anything, the
	// other fails with source.ErrPositionMoved and its rows are claimed
	// again. A batch completed before one claimed earlier fails so too
	// (the relay completes them in claim order). The suite's second
	// claimer beside a held batch is then the store that holds it, and
	// concurrent claimers count a row once per batch that completed.
	OneClaimer bool
	// TableUntouched: the store never writes to the outbox table (a
	// history table read by capture cursor). What became of a row is kept
	// in the relay's own tables, from which the Table's State reads it:
	// handed on and waiting in no retry state, Published, or Failed while
	// it has a dead letter not replayed; else Pending. The table keeps no
	// retry counter nor error, the layout needs SELECT alone, and
	// retention, which deletes rows, does not apply.
	TableUntouched bool
}

// CapableHarness is a Harness that declares its store's capabilities for
// each preset. A Harness that does not has the zero Capabilities.
type CapableHarness interface {
	Harness
	Capabilities(preset string) Capabilities
}

// Reaper is the Table of a store whose claims only a reaper takes back
// (Capabilities.ReleaseKeepsClaim).
type Reaper interface {
	// Reap runs the store's reaper once: every claimed row left without an
	// outcome for longer than olderThan is taken back. It returns how many
	// rows it took back.
	Reap(t *testing.T, olderThan time.Duration) int
}

func capabilitiesOf(h Harness, preset string) Capabilities {
	if c, ok := h.(CapableHarness); ok {
		return c.Capabilities(preset)
	}
	return Capabilities{}
}

// beside is the store a second claimer uses while first holds a batch of
// the source: a new one on tbl, or first itself for a store of one claimer
// per source (OneClaimer).
func (s *suite) beside(t *testing.T, tbl Table, first Store, o Options) Store {
	t.Helper()
	if s.caps.OneClaimer {
		return first
	}
	return tbl.Open(t, o)
}

// reap runs tbl's reaper with olderThan when the store's claims are taken
// back only by it; for other stores the database takes them back itself
// and reap does nothing.
func (s *suite) reap(t *testing.T, tbl Table, olderThan time.Duration) int {
	t.Helper()
	if !s.caps.ReleaseKeepsClaim {
		return 0
	}
	r, ok := tbl.(Reaper)
	if !ok {
		t.Fatalf("the store's claims are taken back only by a reaper (ReleaseKeepsClaim), but its Table %T is no Reaper", tbl)
	}
	return r.Reap(t, olderThan)
}

// giveBack gives a batch's rows back unsent: Release, or, where Release
// keeps the claim, a Complete with every row in no list.
func (s *suite) giveBack(t *testing.T, b source.Batch) {
	t.Helper()
	if b == nil {
		return
	}
	if s.caps.ReleaseKeepsClaim {
		complete(t, b, source.Outcome{})
		return
	}
	release(t, b)
}

// waitClaim is waitClaim giving back the batches that are not the one
// wanted as the store allows (see giveBack). With ClaimsInDueOrder, rows of
// different keys that fall due at about the same moment (a given-back row
// falls due again at once; a reaper takes rows back together) come in no
// order the suite can know: the batch must hold want's rows in any order.
// (The suite never waits for two rows of one key in such a store.)
func (s *suite) waitClaim(t *testing.T, st source.Store, limit int, want []string, timeout time.Duration) source.Batch {
	t.Helper()
	return s.waitTakenBack(t, nil, st, limit, want, timeout, 0)
}

// waitTakenBack is waitClaim running, before each claim, tbl's reaper with
// olderThan where only a reaper takes claims back (tbl nil: never).
func (s *suite) waitTakenBack(t *testing.T, tbl Table, st source.Store, limit int, want []string, timeout, olderThan time.Duration) source.Batch {
	t.Helper()
	deadline := time.Now().Add(timeout)
	var last []string
	for {
		if tbl != nil {
			s.reap(t, tbl, olderThan)
		}
		b := claim(t, st, limit)
		last = ids(b)
		if s.sameClaim(last, want) {
			return b
		}
		s.giveBack(t, b)
		if time.Now().After(deadline) {
			t.Fatalf("after %s a claim returns %v, want %v", timeout, last, want)
		}
		time.Sleep(50 * time.Millisecond)
	}
}

// sameClaim compares a claim's ids with want: in order, or with
// ClaimsInDueOrder as a set (see waitClaim).
func (s *suite) sameClaim(got, want []string) bool {
	if !s.caps.ClaimsInDueOrder {
		return slices.Equal(got, want)
	}
	return len(got) == len(want) && !slices.ContainsFunc(want, func(id string) bool { return !slices.Contains(got, id) })
}

// index is the position of the row with id in b.
func index(t *testing.T, b source.Batch, id string) int {
	t.Helper()
	i := slices.Index(ids(b), id)
	if i < 0 {
		t.Fatalf("row %s not in the batch %v", id, ids(b))
	}
	return i
}

// assertClaimed checks how a claimed, not yet completed row reads: still
// pending where the claim holds it in a transaction; with RemovedAtClaim,
// out of the table yet existing (its claim recorded), neither pending nor
// settled.
func (s *suite) assertClaimed(t *testing.T, tbl Table, ids []string) {
	t.Helper()
	for _, id := range ids {
		st := tbl.State(t, id)
		switch {
		case s.caps.RemovedAtClaim:
			if !st.Exists || st.Pending || st.Published || st.Failed {
				t.Errorf("claimed row %s: %+v, want its claim recorded: existing, neither pending nor settled", id, st)
			}
		case !st.Exists || !st.Pending || st.Published || st.Failed:
			t.Errorf("claimed row %s: %+v, want pending until the claim completes", id, st)
		}
	}
}

// claimAttempts is the attempts a row given back unsent n times after a
// fresh insert has counted: none, or n where every claim is an attempt.
func (s *suite) claimAttempts(n int) int {
	if s.caps.AttemptsCountClaims {
		return n
	}
	return 0
}

// assertHeld checks, for a store whose claims only a reaper takes back,
// that rows of a claim are still claimed: another claimer gets none of them.
func (s *suite) assertHeld(t *testing.T, tbl Table, other source.Store, claimed []string) {
	t.Helper()
	if b := claim(t, other, 10); b != nil {
		t.Fatalf("rows %v were claimed again before the reaper took the claim of %v back", ids(b), claimed)
	}
	s.assertClaimed(t, tbl, claimed)
}
