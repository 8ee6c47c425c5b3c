package sourcetest

import (
	"context"
	"crypto/rand"
	"encoding/hex"
	"encoding/json"
	"errors"
	"fmt"
	"reflect"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/outbox-relay/outbox-relay/internal/layout"
	"github.com/outbox-relay/outbox-relay/internal/source"
)

// expect is what a preset's layout promises, read from the preset itself so
// that the suite follows the layouts as they change.
type expect struct {
	deletes      bool // published and dead rows are deleted
	marksFailed  bool // dead rows are marked failed (status or errored flag)
	deadMarkedOK bool // dead rows look published (a flag or timestamp is the only state)
	retryCount   bool
	errorColumn  bool
	headers      bool
	partitionKey bool
	claims       bool // state.batch_id and state.claimed_at
}

func expectFor(preset string) expect {
	p, ok := layout.Presets[preset]
	if !ok {
		panic(fmt.Sprintf("sourcetest: unknown preset %q", preset))
	}
	st := p.State
	return expect{
		deletes:      st.Mode == "delete",
		marksFailed:  st.Mode == "status" || st.Mode == "queue" || st.Errored != "",
		deadMarkedOK: (st.Mode == "flag" || st.Mode == "timestamp") && st.Errored == "",
		retryCount:   p.RetryCount != "",
		errorColumn:  p.Error != "",
		headers:      p.Headers != "",
		partitionKey: p.PartitionKey != "",
		claims:       st.BatchID != "",
	}
}

// untouched is what a preset's layout promises when the store never writes
// to the table (Capabilities.TableUntouched): its rows and routes, and no
// state of its own. A dead row reads Failed, from its dead letter.
func (e expect) untouched() expect {
	return expect{marksFailed: true, headers: e.headers, partitionKey: e.partitionKey}
}

// suite is one preset's run.
type suite struct {
	h      Harness
	preset string
	exp    expect
	caps   Capabilities
}

// Run runs the conformance suite for every preset of h, each in a parallel
// subtest with tables of its own.
func Run(t *testing.T, h Harness) {
	for _, preset := range h.Presets() {
		s := &suite{h: h, preset: preset, exp: expectFor(preset), caps: capabilitiesOf(h, preset)}
		if s.caps.TableUntouched {
			s.exp = s.exp.untouched()
		}
		t.Run(preset, func(t *testing.T) {
			t.Parallel()
			for _, tc := range []struct {
				name string
				fn   func(*testing.T)
			}{
				{"ClaimOrderAndLimit", s.testClaimOrderAndLimit},
				{"RenderedRow", s.testRenderedRow},
				{"ConcurrentClaimersDisjoint", s.testConcurrentClaimers},
				{"ReleaseLeavesRowsUntouched", s.testRelease},
				{"CompleteOutcome", s.testCompleteOutcome},
				{"PerKeyOrder", s.testPerKeyOrder},
				{"RecordStats", s.testRecordStats},
				{"KilledClaimTakenBack", s.testKilledClaim},
				{"IdleClaimEndsAfterTimeout", s.testIdleClaimTimeout},
				{"ForeignClaims", s.testForeignClaims},
				{"HeldHeadHoldsOnlyItsKey", s.testHeldHead},
				{"ForeignClaimBeyondTheWindow", s.testForeignClaimBeyondWindow},
				{"BucketsPartitionTheSource", s.testBucketsPartition},
				{"BucketCountChangeKeepsKeyOrder", s.testBucketCountChange},
				{"BucketOwnBatchesHoldNoKey", s.testBucketOwnBatches},
				{"BucketWindowPassesOwnBatches", s.testBucketWindowPassesOwnBatches},
				{"PriorityClasses", s.testPriorityClasses},
				{"PrivilegesAsCheckReports", s.testPrivileges},
				{"DeadLetterListFilters", s.testDeadLetterList},
				{"ReplayPutsRowBackPending", s.testReplay},
				{"PurgeDeadLetters", s.testPurgeDead},
				{"RetentionDeletesOnlyOldSettledRows", s.testRetention},
				{"RetentionPrunesReplayedDeadLetters", s.testRetentionReplayed},
				{"RetentionPrunesOrphanedRetryState", s.testRetentionRetryState},
				{"SettledRowsForgetRetryState", s.testSettledForgetRetryState},
				{"RetentionRetriesLockTimeouts", s.testRetentionLockRetry},
				{"RetentionGivesUpOnTableLock", s.testRetentionGivesUp},
				{"RetentionSkipsLockedRows", s.testRetentionSkipsLockedRows},
			} {
				if (tc.name == "ForeignClaims" || tc.name == "ForeignClaimBeyondTheWindow") && !s.exp.claims {
					continue // the preset records no claims (state.batch_id)
				}
				if tc.name == "PriorityClasses" && s.caps.OwnClaimOrder {
					continue // the store claims in an order of its own
				}
				if strings.HasPrefix(tc.name, "Bucket") && s.caps.WholeSourceOnly {
					continue // the store claims whole sources only
				}
				if strings.HasPrefix(tc.name, "Retention") && s.caps.TableUntouched {
					continue // the table is history: the relay deletes none of its rows
				}
				t.Run(tc.name, tc.fn)
			}
		})
	}
}

// newTable makes a table and a unique source name for it.
func (s *suite) newTable(t *testing.T) (Table, string) {
	t.Helper()
	return s.h.NewTable(t, s.preset), "sourcetest_" + suffix()
}

func suffix() string {
	var b [5]byte
	_, _ = rand.Read(b[:])
	return hex.EncodeToString(b[:])
}

// key returns the i-th test key: UUID-shaped, so that any key column type
// holds it.
func key(i int) string { return fmt.Sprintf("00000000-0000-4000-8000-%012d", i) }

// rows builds n rows with distinct keys k0+0, k0+1, ...
func rows(n, k0 int) []Row {
	out := make([]Row, n)
	for i := range out {
		out[i] = Row{Topic: "sourcetest.events", Key: key(k0 + i), Payload: fmt.Sprintf(`{"n": %d}`, i)}
	}
	return out
}

func claim(t *testing.T, st source.Store, limit int) source.Batch {
	t.Helper()
	b, err := st.Claim(context.Background(), limit)
	if err != nil {
		t.Fatalf("claim: %v", err)
	}
	return b
}

func ids(b source.Batch) []string {
	if b == nil {
		return nil
	}
	out := make([]string, 0, len(b.Rows()))
	for _, r := range b.Rows() {
		out = append(out, r.ID)
	}
	return out
}

func release(t *testing.T, b source.Batch) {
	t.Helper()
	if b == nil {
		return
	}
	if err := b.Release(context.Background()); err != nil {
		t.Fatalf("release: %v", err)
	}
}

func complete(t *testing.T, b source.Batch, o source.Outcome) {
	t.Helper()
	if err := b.Complete(context.Background(), o); err != nil {
		t.Fatalf("complete: %v", err)
	}
}

// publishAll completes b with every row published.
func publishAll(t *testing.T, b source.Batch) {
	t.Helper()
	idx := make([]int, len(b.Rows()))
	for i := range idx {
		idx[i] = i
	}
	complete(t, b, source.Outcome{Published: idx})
}

// waitClaim claims until the batch holds want (in that order), or fails
// after timeout. Batches that do not are released.
func waitClaim(t *testing.T, st source.Store, limit int, want []string, timeout time.Duration) source.Batch {
	t.Helper()
	deadline := time.Now().Add(timeout)
	var last []string
	for {
		b := claim(t, st, limit)
		last = ids(b)
		if slices.Equal(last, want) {
			return b
		}
		release(t, b)
		if time.Now().After(deadline) {
			t.Fatalf("after %s a claim returns %v, want %v", timeout, last, want)
		}
		time.Sleep(50 * time.Millisecond)
	}
}

func (s *suite) testClaimOrderAndLimit(t *testing.T) {
	tbl, src := s.newTable(t)
	st := tbl.Open(t, Options{Source: src})
	if b := claim(t, st, 10); b != nil {
		t.Fatalf("claim on an empty table returned %v, want nil", ids(b))
	}
	want := tbl.Insert(t, rows(7, 0)...)
	b := claim(t, st, 4)
	if got := ids(b); !slices.Equal(got, want[:4]) {
		t.Fatalf("claim(4) = %v, want the first four in order %v", got, want[:4])
	}
	s.assertClaimed(t, tbl, want[:4])
	rest := claim(t, s.beside(t, tbl, st, Options{Source: src}), 10)
	if got := ids(rest); !slices.Equal(got, want[4:]) {
		t.Fatalf("second claimer got %v, want the remaining %v", got, want[4:])
	}
	s.giveBack(t, b)
	s.giveBack(t, rest)
	all := claim(t, st, 100)
	defer release(t, all)
	if got := ids(all); !slices.Equal(got, want) {
		t.Fatalf("after release claim(100) = %v, want all in order %v", got, want)
	}
}

func (s *suite) testRenderedRow(t *testing.T) {
	tbl, src := s.newTable(t)
	in := []Row{
		{Topic: "orders.created", Key: key(1), PartitionKey: "tenant-7", Payload: `{"order": 1, "name": "Café"}`, Headers: `{"trace_id": "t-1", "n": 2}`},
		{Topic: "orders.created", Key: "", Payload: `[1, 2, 3]`},
	}
	if s.caps.KeyRequired {
		in[1].Key = key(2)
	}
	id := tbl.Insert(t, in...)
	b := claim(t, tbl.Open(t, Options{Source: src}), 10)
	defer release(t, b)
	if got := ids(b); !slices.Equal(got, id) {
		t.Fatalf("claimed %v, want %v", got, id)
	}
	r0, r1 := b.Rows()[0], b.Rows()[1]
	if !r0.TopicOK || r0.Topic != "orders.created" {
		t.Errorf("topic %q (ok %v), want orders.created", r0.Topic, r0.TopicOK)
	}
	if string(r0.Key) != key(1) {
		t.Errorf("key %q, want %q", r0.Key, key(1))
	}
	if !s.caps.KeyRequired && r1.Key != nil {
		t.Errorf("empty key rendered as %q, want none (nil)", r1.Key)
	}
	if !jsonEqual(r0.Payload, in[0].Payload) || !jsonEqual(r1.Payload, in[1].Payload) {
		t.Errorf("payloads %s, %s; want %s, %s", r0.Payload, r1.Payload, in[0].Payload, in[1].Payload)
	}
	if s.exp.partitionKey {
		if string(r0.PartitionKey) != "tenant-7" || r0.OrderKey != "tenant-7" {
			t.Errorf("partition key %q, order key %q; want tenant-7 for both", r0.PartitionKey, r0.OrderKey)
		}
		if r1.PartitionKey != nil {
			t.Errorf("empty partition key rendered as %q, want none (nil)", r1.PartitionKey)
		}
	} else if r0.OrderKey != key(1) {
		t.Errorf("order key %q, want the key %q", r0.OrderKey, key(1))
	}
	if s.exp.headers {
		if !jsonEqual(r0.Headers, in[0].Headers) {
			t.Errorf("headers %s, want %s", r0.Headers, in[0].Headers)
		}
		if r1.Headers != nil {
			t.Errorf("no headers rendered as %q, want nil", r1.Headers)
		}
	}
	if r0.Attempts != 0 {
		t.Errorf("fresh row has %d attempts", r0.Attempts)
	}
}

// testConcurrentClaimers: claimers side by side publish every row once.
// Where one claimer per source reads it (OneClaimer), a row is counted once
// per batch that completed: claimers beside each other hand rows out again,
// and only one of them records each.
func (s *suite) testConcurrentClaimers(t *testing.T) {
	tbl, src := s.newTable(t)
	const n, claimers = 60, 4
	want := tbl.Insert(t, rows(n, 100)...)
	type result struct {
		ids []string
		err error
	}
	results := make(chan result, claimers)
	for range claimers {
		st := tbl.Open(t, Options{Source: src})
		go func() {
			var got []string
			ctx := context.Background()
			for empty := 0; empty < 3; {
				b, err := st.Claim(ctx, 5)
				if err != nil {
					results <- result{got, err}
					return
				}
				if b == nil {
					empty++
					time.Sleep(20 * time.Millisecond)
					continue
				}
				time.Sleep(5 * time.Millisecond) // hold the claim a while
				idx := make([]int, len(b.Rows()))
				for i := range idx {
					idx[i] = i
				}
				err = b.Complete(ctx, source.Outcome{Published: idx})
				if s.caps.OneClaimer && errors.Is(err, source.ErrPositionMoved) {
					// Another claimer recorded these rows first (or will
					// claim them again): this batch recorded nothing.
					continue
				}
				if err != nil {
					results <- result{got, err}
					return
				}
				got = append(got, ids(b)...)
			}
			results <- result{got, nil}
		}()
	}
	seen := map[string]int{}
	for range claimers {
		r := <-results
		if r.err != nil {
			t.Fatal(r.err)
		}
		for _, id := range r.ids {
			seen[id]++
		}
	}
	for _, id := range want {
		if seen[id] != 1 {
			t.Errorf("row %s claimed %d times, want exactly once", id, seen[id])
		}
	}
	if len(seen) != n {
		t.Errorf("%d distinct rows claimed, want %d", len(seen), n)
	}
}

func (s *suite) testRelease(t *testing.T) {
	tbl, src := s.newTable(t)
	want := tbl.Insert(t, rows(3, 200)...)
	before := make([]RowState, len(want))
	for i, id := range want {
		before[i] = tbl.State(t, id)
		if !before[i].Exists || !before[i].Pending {
			t.Fatalf("inserted row %s: %+v, want pending", id, before[i])
		}
	}
	a, other := tbl.Open(t, Options{Source: src}), tbl.Open(t, Options{Source: src})
	b := claim(t, a, 10)
	if got := ids(b); !slices.Equal(got, want) {
		t.Fatalf("claimed %v, want %v", got, want)
	}
	if o := claim(t, s.beside(t, tbl, a, Options{Source: src}), 10); o != nil {
		release(t, o)
		t.Fatalf("rows of a held batch were claimed again: %v", ids(o))
	}
	release(t, b)
	if s.caps.ReleaseKeepsClaim {
		// Release records nothing (whether a destination got the rows is
		// unknown): the rows stay claimed until the reaper takes them back,
		// the released claim counting as an attempt.
		s.assertHeld(t, tbl, other, want)
		if n := s.reap(t, tbl, 0); n != len(want) {
			t.Fatalf("the reaper took back %d rows of a released claim, want %d", n, len(want))
		}
	}
	for i, id := range want {
		untouched := before[i]
		untouched.Attempts += s.claimAttempts(1)
		if got := tbl.State(t, id); !reflect.DeepEqual(got, untouched) {
			t.Errorf("row %s after release: %+v, want untouched %+v", id, got, untouched)
		}
	}
	again := claim(t, other, 10)
	defer release(t, again)
	if got := ids(again); !s.sameClaim(got, want) {
		t.Fatalf("after release another claimer got %v, want %v", got, want)
	}
	for _, r := range again.Rows() {
		if r.Attempts != s.claimAttempts(1) {
			t.Errorf("row %s has %d attempts after a release, want %d", r.ID, r.Attempts, s.claimAttempts(1))
		}
	}
}

func jsonEqual(got []byte, want string) bool {
	var a, b any
	if json.Unmarshal(got, &a) != nil || json.Unmarshal([]byte(want), &b) != nil {
		return false
	}
	return reflect.DeepEqual(a, b)
}
