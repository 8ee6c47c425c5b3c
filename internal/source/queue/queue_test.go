package queue_test

import (
	"context"
	"errors"
	"fmt"
	"slices"
	"sync"
	"testing"
	"time"

	"github.com/jackc/pgx/v5/pgxpool"

	"github.com/outbox-relay/outbox-relay/internal/fixtures"
	"github.com/outbox-relay/outbox-relay/internal/layout"
	"github.com/outbox-relay/outbox-relay/internal/pgtest"
	"github.com/outbox-relay/outbox-relay/internal/source"
	"github.com/outbox-relay/outbox-relay/internal/source/postgres"
	"github.com/outbox-relay/outbox-relay/internal/source/queue"
)

// newQueue creates seed 003's tables in schema payments and the relay's
// schema, and returns the queue's store as preset payment-queue reads it.
func newQueue(t *testing.T) (*pgxpool.Pool, *queue.Store) {
	t.Helper()
	ctx := context.Background()
	dsn, pool := pgtest.NewDB(t)
	if err := queue.Migrate(ctx, dsn, "payments"); err != nil {
		t.Fatal(err)
	}
	m, err := postgres.NewMigrator(dsn, "outbox_relay")
	if err != nil {
		t.Fatal(err)
	}
	defer func() { _ = m.Close() }()
	if err := m.Up(ctx); err != nil {
		t.Fatal(err)
	}
	tbl := postgres.Table{Schema: "payments", Name: "payment_outbox_pending"}
	merged, explicit, err := layout.Merge("payment-queue", layout.Spec{}, "")
	if err != nil {
		t.Fatal(err)
	}
	cols, err := postgres.Columns(ctx, pool, tbl)
	if err != nil {
		t.Fatal(err)
	}
	l, err := layout.Resolve(merged, explicit, tbl.String(), cols)
	if err != nil {
		t.Fatal(err)
	}
	st, err := queue.New(ctx, pool, queue.Options{Source: "payments", Table: tbl, RelaySchema: "outbox_relay", Layout: l})
	if err != nil {
		t.Fatal(err)
	}
	return pool, st
}

// enqueue is seed 003's producer transaction (an idempotency conflict
// returns the existing outbox_id).
func enqueue(t *testing.T, pool *pgxpool.Pool, instruction, participant, key string) (string, int64) {
	t.Helper()
	id, seq, err := fixtures.EnqueuePayment(context.Background(), pool, participant, instruction, key, `{"amount": 100, "currency": "EUR"}`)
	if err != nil {
		t.Fatal(err)
	}
	return id, seq
}

func count(t *testing.T, pool *pgxpool.Pool, q string, args ...any) int {
	t.Helper()
	var n int
	if err := pool.QueryRow(context.Background(), q, args...).Scan(&n); err != nil {
		t.Fatal(err)
	}
	return n
}

// claim claims up to limit rows and returns the batch (nil: none) and its
// rows by participant.
func claim(t *testing.T, st *queue.Store, limit int) (source.Batch, map[string]int) {
	t.Helper()
	b, err := st.Claim(context.Background(), limit)
	if err != nil {
		t.Fatal(err)
	}
	by := map[string]int{}
	if b == nil {
		return nil, by
	}
	for i, r := range b.Rows() {
		if _, dup := by[r.OrderKey]; dup {
			t.Fatalf("two rows of participant %s in one claim", r.OrderKey)
		}
		by[r.OrderKey] = i
	}
	return b, by
}

// sequences is what a claim took: each participant's sequence numbers.
func sequences(t *testing.T, pool *pgxpool.Pool, b source.Batch) map[string][]int64 {
	t.Helper()
	out := map[string][]int64{}
	if b == nil {
		return out
	}
	for _, r := range b.Rows() {
		var seq int64
		if err := pool.QueryRow(context.Background(), "SELECT sequence_id FROM payments.payment_outbox_attempts WHERE outbox_id = $1::uuid LIMIT 1", r.ID).Scan(&seq); err != nil {
			t.Fatal(err)
		}
		out[r.OrderKey] = append(out[r.OrderKey], seq)
	}
	return out
}

func TestSequenceAllocatorMonotonicUnderConcurrency(t *testing.T) {
	t.Parallel()
	pool, _ := newQueue(t)
	ctx := context.Background()
	var mu sync.Mutex
	var got []int64
	var wg sync.WaitGroup
	for range 8 {
		wg.Go(func() {
			for range 25 {
				var n int64
				if err := pool.QueryRow(ctx, "SELECT payments.bump_participant_outbox_seq('p1')").Scan(&n); err != nil {
					t.Error(err)
					return
				}
				mu.Lock()
				got = append(got, n)
				mu.Unlock()
			}
		})
	}
	wg.Wait()
	slices.Sort(got)
	for i, n := range got {
		if n != int64(i+1) {
			t.Fatalf("sequence numbers %v...: want 1..200 each once", got[:min(len(got), i+3)])
		}
	}
	var other int64
	_ = pool.QueryRow(ctx, "SELECT payments.bump_participant_outbox_seq('p2')").Scan(&other)
	if other != 1 {
		t.Errorf("another participant's first number %d, want 1", other)
	}
}

func TestEnqueueIdempotency(t *testing.T) {
	t.Parallel()
	pool, _ := newQueue(t)
	id1, seq1 := enqueue(t, pool, "ins-1", "p1", "k1")
	id2, seq2 := enqueue(t, pool, "ins-1", "p1", "k1")
	if id1 != id2 || seq1 != seq2 {
		t.Errorf("the same instruction and key enqueued twice: %s/%d and %s/%d", id1, seq1, id2, seq2)
	}
	if n := count(t, pool, "SELECT count(*) FROM payments.payment_outbox_pending"); n != 1 {
		t.Errorf("%d pending rows, want 1", n)
	}
}

// TestClaimMovesTheRowToDispatchingAtomically: the claim's attempt is a
// DISPATCHING one, numbered 1, and a claim the archive refuses takes
// nothing. (The conformance suite checks that a claimed row leaves the hot
// table with its claim recorded, and its topic and key.)
func TestClaimMovesTheRowToDispatchingAtomically(t *testing.T) {
	t.Parallel()
	pool, st := newQueue(t)
	ctx := context.Background()
	id, _ := enqueue(t, pool, "ins-1", "p1", "k1")
	b, by := claim(t, st, 10)
	if b == nil || len(b.Rows()) != 1 || b.Rows()[by["p1"]].ID != id || b.Rows()[0].Attempts != 0 {
		t.Fatalf("claim: %+v", b)
	}
	if r := b.Rows()[0]; r.AggregateID != "ins-1" || len(r.Extra) != 2 || *r.Extra[0] != "k1" || *r.Extra[1] != "1" {
		t.Errorf("claimed row %+v: want instruction ins-1, the idempotency key and sequence 1", r)
	}
	if n := count(t, pool, "SELECT count(*) FROM payments.payment_outbox_attempts WHERE outbox_id = $1 AND state = 'DISPATCHING' AND attempt_no = 1", id); n != 1 {
		t.Errorf("%d DISPATCHING attempts", n)
	}
	// When the archive refuses the attempt, the row is not taken either.
	id2, _ := enqueue(t, pool, "ins-2", "p2", "k2")
	pgtest.Exec(t, pool, `CREATE FUNCTION payments.refuse() RETURNS trigger LANGUAGE plpgsql AS $$
BEGIN RAISE EXCEPTION 'refused by the test'; END $$;
CREATE TRIGGER refuse BEFORE INSERT ON payments.payment_outbox_attempts FOR EACH ROW EXECUTE FUNCTION payments.refuse()`)
	if b, err := st.Claim(ctx, 10); err == nil {
		t.Fatalf("claim succeeded although the archive refused: %+v", b)
	}
	if n := count(t, pool, "SELECT count(*) FROM payments.payment_outbox_pending WHERE outbox_id = $1", id2); n != 1 {
		t.Error("the row left the pending table without its DISPATCHING attempt")
	}
}

// TestOutcomes: what the archive records of each outcome (the rail's
// receipts, codes and errors), a second outcome of an attempt refused, and
// a replay. (The conformance suite checks where each row goes: published
// and dead rows out of the queue, a retried or unsent row back with its
// attempts counted and not before its time, the dead letter and its
// reason.)
func TestOutcomes(t *testing.T) {
	t.Parallel()
	pool, st := newQueue(t)
	ctx := context.Background()
	enqueue(t, pool, "ins-1", "p1", "k1")
	enqueue(t, pool, "ins-2", "p2", "k2")
	enqueue(t, pool, "ins-3", "p3", "k3")
	enqueue(t, pool, "ins-4", "p4", "k4")
	b, by := claim(t, st, 10)
	if b == nil || len(b.Rows()) != 4 {
		t.Fatalf("claim: %+v", b)
	}
	rows := b.Rows()
	ok, retry, dead, unsent := by["p1"], by["p2"], by["p3"], by["p4"]
	receipts := make([]source.Receipt, len(rows))
	receipts[ok] = source.Receipt{Reference: "ref-1", Code: "ACCP", Latency: 42 * time.Millisecond}
	receipts[retry] = source.Receipt{Code: "503"}
	receipts[dead] = source.Receipt{Code: "AC01"}
	at := time.Now().Add(time.Hour)
	o := source.Outcome{Published: []int{ok}, Retry: []source.Retry{{Index: retry, Attempts: 1, At: at, Err: "HTTP 503"}},
		Dead: []source.Dead{{Index: dead, Attempts: 1, Reason: "invalid account", PayloadIsJSON: true}}, Receipts: receipts}
	if err := b.Complete(ctx, o); err != nil {
		t.Fatal(err)
	}
	if err := b.Complete(ctx, o); !errors.Is(err, queue.ErrSettled) {
		t.Errorf("a second outcome for the same attempts: %v, want ErrSettled", err)
	}
	// Success: DISPATCHED with the rail's reference and code; not requeued.
	if n := count(t, pool, `SELECT count(*) FROM payments.payment_outbox_attempts WHERE outbox_id = $1 AND state = 'DISPATCHED'
  AND rail_reference = 'ref-1' AND rail_code = 'ACCP' AND latency_ms = 42 AND completed_at IS NOT NULL`, rows[ok].ID); n != 1 {
		t.Error("no DISPATCHED attempt with the rail's reference, code and latency")
	}
	// Retry: RETRYABLE appended, the row back with the same ids, one more attempt, due later.
	if n := count(t, pool, "SELECT count(*) FROM payments.payment_outbox_attempts WHERE outbox_id = $1 AND state = 'RETRYABLE' AND rail_code = '503' AND error_message = 'HTTP 503'", rows[retry].ID); n != 1 {
		t.Error("no RETRYABLE attempt with the rail's code and the error")
	}
	if n := count(t, pool, `SELECT count(*) FROM payments.payment_outbox_pending WHERE outbox_id = $1 AND sequence_id = 1`, rows[retry].ID); n != 1 {
		t.Error("the retried row is not back once, with the same sequence")
	}
	// Terminal: FAILED with the rail's code and the reason.
	if n := count(t, pool, "SELECT count(*) FROM payments.payment_outbox_attempts WHERE outbox_id = $1 AND state = 'FAILED' AND error_code = 'AC01' AND error_message = 'invalid account'", rows[dead].ID); n != 1 {
		t.Error("no FAILED attempt with the rail's code and the reason")
	}
	dl, err := postgres.ListFailed(ctx, pool, "outbox_relay", source.DLQFilter{Source: "payments"})
	if err != nil || len(dl) != 1 {
		t.Fatalf("dead letters %+v (%v), want the FAILED row's", dl, err)
	}
	// Unsent: a RETRYABLE attempt that says so.
	if n := count(t, pool, "SELECT count(*) FROM payments.payment_outbox_attempts WHERE outbox_id = $1 AND state = 'RETRYABLE' AND error_code = 'RELEASED'", rows[unsent].ID); n != 1 {
		t.Error("the row left unsent has no RETRYABLE RELEASED attempt")
	}
	if b, _ := claim(t, st, 10); b == nil || len(b.Rows()) != 1 || b.Rows()[0].ID != rows[unsent].ID {
		t.Fatalf("after the outcomes claimed %+v, want only the unsent row", b)
	}
	// A replay puts the dead letter's row back, once.
	if n, err := st.Replay(ctx, dl, "test"); err != nil || n != 1 {
		t.Fatalf("replay: %d %v", n, err)
	}
	if _, err := st.Replay(ctx, dl, "test"); !errors.Is(err, queue.ErrNotReplayable) {
		t.Errorf("a second replay while the row is pending: %v, want ErrNotReplayable", err)
	}
	if b, by := claim(t, st, 10); b == nil || len(b.Rows()) != 1 || b.Rows()[by["p3"]].ID != rows[dead].ID {
		t.Fatalf("after the replay claimed %+v, want the replayed row", b)
	}
}

// TestSequenceGapHoldsItsParticipant: a participant whose earliest waiting
// row is more than one past its last settled sequence number is held, and
// Gaps names it; other participants flow. (The conformance suite checks
// one dispatch per participant at a time, in order, and that a retry holds
// its participant only.)
func TestSequenceGapHoldsItsParticipant(t *testing.T) {
	t.Parallel()
	pool, st := newQueue(t)
	ctx := context.Background()
	for i := range 3 {
		enqueue(t, pool, fmt.Sprintf("a-%d", i), "pa", fmt.Sprint(i))
	}
	first, by := claim(t, st, 10)
	if got := sequences(t, pool, first); len(got) != 1 || !slices.Equal(got["pa"], []int64{1}) {
		t.Fatalf("first claim %v, want pa's 1", got)
	}
	// pa's 2 goes missing from the queue; 3 must not go.
	pgtest.Exec(t, pool, "DELETE FROM payments.payment_outbox_pending WHERE participant_id = 'pa' AND sequence_id = 2")
	if err := first.Complete(ctx, source.Outcome{Published: []int{by["pa"]}}); err != nil {
		t.Fatal(err)
	}
	enqueue(t, pool, "b-0", "pb", "0")
	b, _ := claim(t, st, 10)
	if got := sequences(t, pool, b); len(got) != 1 || !slices.Equal(got["pb"], []int64{1}) {
		t.Fatalf("claimed %v, want pb's 1 only: pa is held past its missing 2", got)
	}
	gaps, err := st.Gaps(ctx)
	if err != nil || len(gaps) != 1 || gaps[0] != (queue.Gap{Participant: "pa", Next: 3, Last: 1}) {
		t.Errorf("gaps %+v (%v), want pa waiting at 3 after 1", gaps, err)
	}
}

// TestReaperRequeuesZombies: a dispatch left DISPATCHING past the timeout
// (its dispatcher died) is put back once, with a ZOMBIE_REQUEUE outcome,
// however many reapers run at once; then it is claimed again, and the dead
// dispatcher's late outcome is refused.
func TestReaperRequeuesZombies(t *testing.T) {
	t.Parallel()
	pool, st := newQueue(t)
	ctx := context.Background()
	id, seq := enqueue(t, pool, "ins-1", "p1", "k1")
	enqueue(t, pool, "ins-2", "p1", "k2") // held behind the zombie
	zombie, _ := claim(t, st, 10)
	if zombie == nil || len(zombie.Rows()) != 1 {
		t.Fatalf("claim: %+v", zombie)
	}
	if zs, err := st.Reap(ctx, 2*time.Minute); err != nil || len(zs) != 0 {
		t.Fatalf("reap of a fresh dispatch: %v %v", zs, err)
	}
	pgtest.Exec(t, pool, "UPDATE payments.payment_outbox_attempts SET claimed_at = now() - interval '10 minutes'")
	var wg sync.WaitGroup
	var mu sync.Mutex
	var total []queue.Zombie
	for range 5 {
		wg.Go(func() {
			zs, err := st.Reap(ctx, 2*time.Minute)
			if err != nil {
				t.Error(err)
			}
			mu.Lock()
			total = append(total, zs...)
			mu.Unlock()
		})
	}
	wg.Wait()
	if len(total) != 1 || total[0] != (queue.Zombie{ID: id, Participant: "p1", Sequence: seq}) {
		t.Fatalf("five reapers put back %+v, want p1's row once", total)
	}
	if n := count(t, pool, "SELECT count(*) FROM payments.payment_outbox_attempts WHERE outbox_id = $1 AND state = 'ZOMBIE_REQUEUE'", id); n != 1 {
		t.Errorf("%d ZOMBIE_REQUEUE outcomes, want 1", n)
	}
	again, _ := claim(t, st, 10)
	if again == nil || len(again.Rows()) != 1 || again.Rows()[0].ID != id || again.Rows()[0].Attempts != 1 {
		t.Fatalf("after the reap claimed %+v, want the same row again as attempt 2", again)
	}
	if err := zombie.Complete(ctx, source.Outcome{Published: []int{0}}); !errors.Is(err, queue.ErrSettled) {
		t.Errorf("the dead dispatcher's late outcome: %v, want ErrSettled", err)
	}
}

func TestGauges(t *testing.T) {
	t.Parallel()
	pool, st := newQueue(t)
	ctx := context.Background()
	enqueue(t, pool, "ins-1", "p1", "k1")
	enqueue(t, pool, "ins-2", "p2", "k2")
	enqueue(t, pool, "ins-3", "p3", "k3")
	pgtest.Exec(t, pool, "UPDATE payments.payment_outbox_pending SET created_at = now() - interval '90 seconds', next_attempt_at = now() - interval '90 seconds' WHERE instruction_id = 'ins-3'")
	b, _ := claim(t, st, 2) // ins-3 first: the oldest
	if b == nil || len(b.Rows()) != 2 || b.Rows()[0].AggregateID != "ins-3" {
		t.Fatalf("claim: %+v", b)
	}
	pgtest.Exec(t, pool, "UPDATE payments.payment_outbox_attempts SET claimed_at = now() - interval '5 minutes' WHERE instruction_id = 'ins-3'")
	g, err := st.Gauges(ctx, 2*time.Minute)
	if err != nil {
		t.Fatal(err)
	}
	if g.Pending != 1 || g.StuckDispatching != 1 || g.OldestPendingAge <= 0 || g.OldestPendingAge > time.Minute {
		t.Errorf("gauges %+v: want 1 pending (under a minute old), 1 stuck dispatch", g)
	}
}

// TestClaimFencedByLease: under a lease, a claim takes nothing unless the
// lease is still this holder's term; a deposed holder's claim leaves the
// rows to the new one.
func TestClaimFencedByLease(t *testing.T) {
	t.Parallel()
	pool, st := newQueue(t)
	enqueue(t, pool, "ins-1", "p1", "k1")
	pgtest.Exec(t, pool, "INSERT INTO outbox_relay.leases (shard, owner, term, expires_at) VALUES ('payments', 'new', 2, now() + interval '1 minute')")
	st.Fence.Set(&source.Lease{Shard: "payments", Owner: "old", Term: 1})
	if b, _ := claim(t, st, 10); b != nil {
		t.Fatalf("a deposed holder claimed %d rows", len(b.Rows()))
	}
	if n := count(t, pool, "SELECT count(*) FROM payments.payment_outbox_pending"); n != 1 {
		t.Fatal("the deposed holder's claim took the row")
	}
	st.Fence.Set(&source.Lease{Shard: "payments", Owner: "new", Term: 2})
	if b, _ := claim(t, st, 10); b == nil || len(b.Rows()) != 1 {
		t.Fatalf("the holder's claim: %+v", b)
	}
}
