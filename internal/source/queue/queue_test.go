package queue_test

import (
	"context"
	"errors"
	"fmt"
	"slices"
	"sync"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgconn"
	"github.com/jackc/pgx/v5/pgxpool"

	"github.com/outbox-relay/outbox-relay/internal/pgtest"
	"github.com/outbox-relay/outbox-relay/internal/source/queue"
)

func newQueue(t *testing.T) (*pgxpool.Pool, *queue.Store) {
	t.Helper()
	dsn, pool := pgtest.NewDB(t)
	if err := queue.Migrate(context.Background(), dsn, "payments"); err != nil {
		t.Fatal(err)
	}
	return pool, queue.New(pool, "payments")
}

// enqueue is the producer's transaction: the participant's next sequence
// number, then the pending row; an idempotency conflict returns the
// existing outbox_id.
func enqueue(t *testing.T, pool *pgxpool.Pool, instruction, participant, key string) (string, int64) {
	t.Helper()
	ctx := context.Background()
	var id string
	var seq int64
	err := pgx.BeginFunc(ctx, pool, func(tx pgx.Tx) error {
		if err := tx.QueryRow(ctx, "SELECT payments.bump_participant_outbox_seq($1)", participant).Scan(&seq); err != nil {
			return err
		}
		return tx.QueryRow(ctx, `INSERT INTO payments.payment_outbox_pending (instruction_id, participant_id, sequence_id,
  idempotency_key, rail_type, payload) VALUES ($1, $2, $3, $4, 'sepa', '{"amount": 100, "currency": "EUR"}')
RETURNING outbox_id::text`, instruction, participant, seq, key).Scan(&id)
	})
	var pgErr *pgconn.PgError
	if errors.As(err, &pgErr) && pgErr.Code == "23505" {
		if err := pool.QueryRow(ctx, `SELECT outbox_id::text, sequence_id FROM payments.payment_outbox_pending
WHERE instruction_id = $1 AND idempotency_key = $2`, instruction, key).Scan(&id, &seq); err != nil {
			t.Fatal(err)
		}
		return id, seq
	}
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

func TestClaimMovesTheRowToDispatchingAtomically(t *testing.T) {
	t.Parallel()
	pool, st := newQueue(t)
	ctx := context.Background()
	id, _ := enqueue(t, pool, "ins-1", "p1", "k1")
	ds, err := st.Claim(ctx, 10)
	if err != nil || len(ds) != 1 || ds[0].OutboxID != id || ds[0].AttemptNo != 1 {
		t.Fatalf("claim: %+v %v", ds, err)
	}
	if n := count(t, pool, "SELECT count(*) FROM payments.payment_outbox_pending"); n != 0 {
		t.Errorf("%d pending rows after the claim", n)
	}
	if n := count(t, pool, "SELECT count(*) FROM payments.payment_outbox_attempts WHERE outbox_id = $1 AND state = 'DISPATCHING' AND attempt_no = 1", id); n != 1 {
		t.Errorf("%d DISPATCHING attempts", n)
	}
	// When the archive refuses the attempt, the row is not taken either.
	id2, _ := enqueue(t, pool, "ins-2", "p2", "k2")
	pgtest.Exec(t, pool, `CREATE FUNCTION payments.refuse() RETURNS trigger LANGUAGE plpgsql AS $$
BEGIN RAISE EXCEPTION 'refused by the test'; END $$;
CREATE TRIGGER refuse BEFORE INSERT ON payments.payment_outbox_attempts FOR EACH ROW EXECUTE FUNCTION payments.refuse()`)
	if ds, err := st.Claim(ctx, 10); err == nil {
		t.Fatalf("claim succeeded although the archive refused: %+v", ds)
	}
	if n := count(t, pool, "SELECT count(*) FROM payments.payment_outbox_pending WHERE outbox_id = $1", id2); n != 1 {
		t.Error("the row left the pending table without its DISPATCHING attempt")
	}
}

func TestOutcomes(t *testing.T) {
	t.Parallel()
	pool, st := newQueue(t)
	ctx := context.Background()
	enqueue(t, pool, "ins-1", "p1", "k1")
	enqueue(t, pool, "ins-2", "p2", "k2")
	ds, err := st.Claim(ctx, 10)
	if err != nil || len(ds) != 2 {
		t.Fatalf("claim: %+v %v", ds, err)
	}
	ok, retry := ds[0], ds[1]
	if ok.ParticipantID != "p1" {
		ok, retry = retry, ok
	}
	if err := st.Dispatched(ctx, ok, queue.Outcome{RailReference: "ref-1", RailCode: "ACCP", Latency: 42 * time.Millisecond}); err != nil {
		t.Fatal(err)
	}
	if err := st.Dispatched(ctx, ok, queue.Outcome{}); !errors.Is(err, queue.ErrSettled) {
		t.Errorf("a second outcome for one attempt: %v, want ErrSettled", err)
	}
	at := time.Now().Add(time.Hour)
	if err := st.Retry(ctx, retry, queue.Outcome{RailCode: "TIMEOUT", ErrorMessage: "no answer"}, at); err != nil {
		t.Fatal(err)
	}
	if err := st.Retry(ctx, retry, queue.Outcome{}, at); !errors.Is(err, queue.ErrSettled) {
		t.Errorf("a second retry of one attempt: %v, want ErrSettled", err)
	}
	// Success: DISPATCHED with the rail's reference and code; not requeued.
	if n := count(t, pool, `SELECT count(*) FROM payments.payment_outbox_attempts WHERE outbox_id = $1 AND state = 'DISPATCHED'
  AND rail_reference = 'ref-1' AND rail_code = 'ACCP' AND latency_ms = 42 AND completed_at IS NOT NULL`, ok.OutboxID); n != 1 {
		t.Error("no DISPATCHED attempt with the rail's reference, code and latency")
	}
	if n := count(t, pool, "SELECT count(*) FROM payments.payment_outbox_pending WHERE outbox_id = $1", ok.OutboxID); n != 0 {
		t.Error("a dispatched row was requeued")
	}
	// Retry: RETRYABLE appended, the row back with the same ids, one more attempt, due later.
	if n := count(t, pool, "SELECT count(*) FROM payments.payment_outbox_attempts WHERE outbox_id = $1 AND state = 'RETRYABLE'", retry.OutboxID); n != 1 {
		t.Error("no RETRYABLE attempt")
	}
	if n := count(t, pool, `SELECT count(*) FROM payments.payment_outbox_pending WHERE outbox_id = $1 AND sequence_id = $2
  AND attempt_count = 1 AND next_attempt_at > now() + interval '59 minutes'`, retry.OutboxID, retry.SequenceID); n != 1 {
		t.Error("the retried row is not back once, with the same sequence, one attempt counted, due after its backoff")
	}
	if ds, err := st.Claim(ctx, 10); err != nil || len(ds) != 0 {
		t.Errorf("a row backing off was claimed: %+v %v", ds, err)
	}
}

// TestStrictSequencePerParticipant: a participant's dispatches go one at a
// time in sequence order; its retry holds it alone; a gap holds it.
func TestStrictSequencePerParticipant(t *testing.T) {
	t.Parallel()
	pool, st := newQueue(t)
	ctx := context.Background()
	for i := range 3 {
		enqueue(t, pool, fmt.Sprintf("a-%d", i), "pa", fmt.Sprint(i))
	}
	enqueue(t, pool, "b-0", "pb", "0")
	claimed := func() map[string][]int64 {
		ds, err := st.Claim(ctx, 10)
		if err != nil {
			t.Fatal(err)
		}
		out := map[string][]int64{}
		for _, d := range ds {
			out[d.ParticipantID] = append(out[d.ParticipantID], d.SequenceID)
		}
		return out
	}
	first, err := st.Claim(ctx, 10)
	if err != nil {
		t.Fatal(err)
	}
	bySeq := map[string]int64{}
	var pa1, pb1 queue.Dispatch
	for _, d := range first {
		bySeq[d.ParticipantID] = d.SequenceID
		if d.ParticipantID == "pa" {
			pa1 = d
		} else {
			pb1 = d
		}
	}
	if len(first) != 2 || bySeq["pa"] != 1 || bySeq["pb"] != 1 {
		t.Fatalf("first claim %v, want pa's 1 and pb's 1 only", bySeq)
	}
	// pa's first is in flight: nothing more of pa.
	if got := claimed(); len(got["pa"]) != 0 {
		t.Fatalf("claimed %v while pa's 1 is in flight", got)
	}
	// pa's first backs off: pa waits; others do not.
	if err := st.Retry(ctx, pa1, queue.Outcome{RailCode: "BUSY"}, time.Now().Add(-time.Second)); err != nil {
		t.Fatal(err)
	}
	if err := st.Dispatched(ctx, pb1, queue.Outcome{RailReference: "r"}); err != nil {
		t.Fatal(err)
	}
	enqueue(t, pool, "b-1", "pb", "1")
	got := claimed()
	if !slices.Equal(got["pa"], []int64{1}) || !slices.Equal(got["pb"], []int64{2}) {
		t.Fatalf("after pa's retry claimed %v, want pa's 1 again and pb's 2", got)
	}
	// A gap: pa's 2 goes missing from the queue; 3 must not go.
	pgtest.Exec(t, pool, "DELETE FROM payments.payment_outbox_pending WHERE participant_id = 'pa' AND sequence_id = 2")
	var second queue.Dispatch
	if err := pool.QueryRow(ctx, `SELECT attempt_id::text, outbox_id::text, instruction_id, participant_id, idempotency_key, rail_type,
  sequence_id, attempt_no, payload::text, claimed_at FROM payments.payment_outbox_attempts
WHERE participant_id = 'pa' AND sequence_id = 1 AND attempt_no = 2`).Scan(&second.AttemptID, &second.OutboxID, &second.InstructionID,
		&second.ParticipantID, &second.IdempotencyKey, &second.RailType, &second.SequenceID, &second.AttemptNo, &second.Payload, &second.ClaimedAt); err != nil {
		t.Fatal(err)
	}
	if err := st.Dispatched(ctx, second, queue.Outcome{RailReference: "r"}); err != nil {
		t.Fatal(err)
	}
	if got := claimed(); len(got["pa"]) != 0 {
		t.Fatalf("claimed %v past pa's missing 2", got)
	}
}

// TestReaperRequeuesZombies: a dispatch left DISPATCHING past the timeout
// (its dispatcher died) is put back once, with a ZOMBIE_REQUEUE outcome,
// however many reapers run at once; then it is claimed again.
func TestReaperRequeuesZombies(t *testing.T) {
	t.Parallel()
	pool, st := newQueue(t)
	ctx := context.Background()
	id, seq := enqueue(t, pool, "ins-1", "p1", "k1")
	enqueue(t, pool, "ins-2", "p1", "k2") // held behind the zombie
	if ds, err := st.Claim(ctx, 10); err != nil || len(ds) != 1 {
		t.Fatalf("claim: %+v %v", ds, err)
	}
	if n, err := st.Reap(ctx, 2*time.Minute); err != nil || n != 0 {
		t.Fatalf("reap of a fresh dispatch: %d %v", n, err)
	}
	pgtest.Exec(t, pool, "UPDATE payments.payment_outbox_attempts SET claimed_at = now() - interval '10 minutes'")
	var wg sync.WaitGroup
	var mu sync.Mutex
	total := 0
	for range 5 {
		wg.Go(func() {
			n, err := st.Reap(ctx, 2*time.Minute)
			if err != nil {
				t.Error(err)
			}
			mu.Lock()
			total += n
			mu.Unlock()
		})
	}
	wg.Wait()
	if total != 1 {
		t.Fatalf("five reapers put back %d rows, want 1", total)
	}
	if n := count(t, pool, "SELECT count(*) FROM payments.payment_outbox_attempts WHERE outbox_id = $1 AND state = 'ZOMBIE_REQUEUE'", id); n != 1 {
		t.Errorf("%d ZOMBIE_REQUEUE outcomes, want 1", n)
	}
	ds, err := st.Claim(ctx, 10)
	if err != nil || len(ds) != 1 || ds[0].OutboxID != id || ds[0].SequenceID != seq || ds[0].AttemptNo != 2 {
		t.Fatalf("after the reap claimed %+v (%v), want the same row again as attempt 2", ds, err)
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
	ds, err := st.Claim(ctx, 2) // ins-3 first: the oldest
	if err != nil || len(ds) != 2 {
		t.Fatalf("claim: %+v %v", ds, err)
	}
	if err := st.Failed(ctx, ds[0], queue.Outcome{ErrorCode: "INVALID_IBAN"}); err != nil {
		t.Fatal(err)
	}
	pgtest.Exec(t, pool, "UPDATE payments.payment_outbox_attempts SET claimed_at = now() - interval '5 minutes' WHERE state = 'DISPATCHING'")
	g, err := st.Gauges(ctx, 2*time.Minute)
	if err != nil {
		t.Fatal(err)
	}
	if g.Pending != 1 || g.DeadLetters != 1 || g.StuckDispatching != 1 || g.OldestPendingAge <= 0 || g.OldestPendingAge > time.Minute {
		t.Errorf("gauges %+v: want 1 pending (under a minute old), 1 dead letter, 1 stuck dispatch", g)
	}
}
