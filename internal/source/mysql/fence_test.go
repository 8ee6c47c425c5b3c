package mysql_test

import (
	"context"
	"errors"
	"testing"
	"time"

	"github.com/outbox-relay/outbox-relay/internal/mytest"
	"github.com/outbox-relay/outbox-relay/internal/source"
	"github.com/outbox-relay/outbox-relay/internal/source/mysql"
)

// TestDeposedHolderCompletesNothing guards the lease checks of a batch: a
// batch claimed under a term cannot complete once another owner holds the
// source, and a deposed holder cannot claim at all; under the current term
// both work.
func TestDeposedHolderCompletesNothing(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	e := newEnv(t)
	e.exec(t, kafkaOutbox)
	for range 4 {
		e.exec(t, "INSERT INTO kafka_outbox (topic, payload_json, `key`) VALUES ('t', '{}', 'k')")
	}
	sfx := mytest.Suffix()
	ownerA, ownerB := "a-"+sfx, "b-"+sfx
	aDB := e.open(t, mysql.ConnOptions{Owner: ownerA})
	a := mysql.NewLeases(aDB, e.relayDB, ownerA)
	defer a.Close()
	la, err := a.Acquire(ctx, "s", time.Minute)
	if err != nil || la == nil {
		t.Fatalf("a: %+v %v", la, err)
	}
	st, _ := e.store(t, aDB, "s", "kafka_outbox", "", kafkaLayout, true)
	st.Fence.Set(la)
	b1, err := st.Claim(ctx, 2)
	if err != nil || b1 == nil {
		t.Fatalf("claim: %v %v", b1, err)
	}
	// b takes the source over (a's lease expired) while a's batch is open.
	e.exec(t, "UPDATE "+e.relayDB+".leases SET expires_at = NOW(6) - INTERVAL 1 SECOND")
	b := mysql.NewLeases(e.db, e.relayDB, ownerB)
	defer b.Close()
	lb, err := b.Acquire(ctx, "s", time.Minute)
	if err != nil || lb == nil || lb.Term != 2 {
		t.Fatalf("b: %+v %v", lb, err)
	}
	err = b1.Complete(ctx, source.Outcome{Published: []int{0},
		Dead: []source.Dead{{Index: 1, Attempts: 1, Reason: "refused", PayloadIsJSON: true}}})
	if !errors.Is(err, source.ErrLeaseLost) {
		t.Fatalf("deposed holder's Complete = %v, want ErrLeaseLost", err)
	}
	pending := queryInt(t, e.db, "SELECT COUNT(*) FROM kafka_outbox WHERE push_completed_at IS NULL")
	dead := queryInt(t, e.db, "SELECT COUNT(*) FROM "+e.relayDB+".failed_events")
	if pending != 4 || dead != 0 {
		t.Fatalf("after the deposed holder's completion: %d pending (want 4), %d dead letters (want 0)", pending, dead)
	}
	if b2, err := st.Claim(ctx, 2); !errors.Is(err, source.ErrLeaseLost) {
		if b2 != nil {
			_ = b2.Release(ctx)
		}
		t.Fatalf("deposed holder's Claim = %v, want ErrLeaseLost", err)
	}
	// The new holder claims and completes.
	st2, _ := e.store(t, e.db, "s", "kafka_outbox", "", kafkaLayout, true)
	st2.Fence.Set(lb)
	b3, err := st2.Claim(ctx, 10)
	if err != nil || b3 == nil || len(b3.Rows()) != 4 {
		t.Fatalf("claim: %v %v", b3, err)
	}
	if err := b3.Complete(ctx, source.Outcome{Published: all(b3)}); err != nil {
		t.Fatalf("the holder's Complete: %v", err)
	}
}

// TestEndOwnerEndsTheClaims guards the hand-over: the new owner ends the
// previous owner's open claim and returns only once it is gone, and does not
// wait for transactions the previous owner begins afterwards.
func TestEndOwnerEndsTheClaims(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	e := newEnv(t)
	e.exec(t, kafkaOutbox)
	for range 4 {
		e.exec(t, "INSERT INTO kafka_outbox (topic, payload_json, `key`) VALUES ('t', '{}', 'k')")
	}
	sfx := mytest.Suffix()
	ownerA, ownerB := "a-"+sfx, "b-"+sfx
	aDB := e.open(t, mysql.ConnOptions{Owner: ownerA})
	st, _ := e.store(t, aDB, "s", "kafka_outbox", "", kafkaLayout, true)
	held, err := st.Claim(ctx, 2) // a frozen holder's open claim
	if err != nil || held == nil {
		t.Fatalf("claim: %v %v", held, err)
	}
	b := mysql.NewLeases(e.db, e.relayDB, ownerB)
	defer b.Close()
	wctx, cancel := context.WithTimeout(ctx, 10*time.Second)
	defer cancel()
	if err := b.EndOwner(wctx, ownerA, "kafka_outbox", func(err error) { t.Log(err) }); err != nil {
		t.Fatalf("EndOwner: %v", err)
	}
	free := queryInt(t, e.db, "SELECT COUNT(*) FROM (SELECT id FROM kafka_outbox FOR UPDATE SKIP LOCKED) x")
	if free != 4 {
		t.Fatalf("%d rows free after EndOwner, want 4", free)
	}
	if err := held.Complete(ctx, source.Outcome{Published: []int{0, 1}}); err == nil {
		t.Fatal("the ended claim completed")
	}
	if n := queryInt(t, e.db, "SELECT COUNT(*) FROM kafka_outbox WHERE push_completed_at IS NULL"); n != 4 {
		t.Fatalf("%d rows pending, want 4", n)
	}
}
