package e2e

import (
	"context"
	"database/sql"
	"fmt"
	"slices"
	"strconv"
	"sync"
	"testing"
	"time"

	_ "github.com/jackc/pgx/v5/stdlib"
	"github.com/twmb/franz-go/pkg/kfake"
	"go.opentelemetry.io/otel/trace"

	"github.com/outbox-relay/outbox-relay/internal/config"
	"github.com/outbox-relay/outbox-relay/internal/fixtures"
	"github.com/outbox-relay/outbox-relay/internal/pgtest"
	"github.com/outbox-relay/outbox-relay/internal/source/queue"
	"github.com/outbox-relay/outbox-relay/outbox"
)

// TestOutboxLibraryRelayedInOrder: events the outbox package writes into
// seed 001's table, several per transaction, are relayed in the order
// written for each partition key, with the writer's traceparent.
func TestOutboxLibraryRelayedInOrder(t *testing.T) {
	t.Parallel()
	dsn, pool := pgtest.NewDB(t)
	pgtest.Exec(t, pool, fixtures.Seed001)
	c := kafkaCluster(t, kfake.SeedTopics(3, "orders"))
	col := collect(t, c.ListenAddrs(), "orders")
	db, err := sql.Open("pgx", dsn)
	if err != nil {
		t.Fatal(err)
	}
	defer db.Close()
	traceID, _ := trace.TraceIDFromHex("4bf92f3577b34da6a3ce929d0e0e4736")
	spanID, _ := trace.SpanIDFromHex("00f067aa0ba902b7")
	ctx := trace.ContextWithSpanContext(context.Background(), trace.NewSpanContext(trace.SpanContextConfig{
		TraceID: traceID, SpanID: spanID, TraceFlags: trace.FlagsSampled}))
	w := outbox.New(outbox.Postgres, outbox.Presets["status"])
	const txs, perTx, keys = 30, 4, 6
	for i := range txs {
		tx, err := db.BeginTx(ctx, nil)
		if err != nil {
			t.Fatal(err)
		}
		for j := range perTx {
			n := i*perTx + j
			if _, err := w.Write(ctx, tx, outbox.Event{Type: "order.placed", AggregateType: "Order",
				AggregateID: fmt.Sprintf("9b2e3c1a-5f4d-4c2b-8a7e-%012d", n%keys), Topic: "orders", PartitionKey: "k" + strconv.Itoa(n%keys),
				Payload: map[string]int{"n": n}}); err != nil {
				t.Fatal(err)
			}
		}
		if err := tx.Commit(); err != nil {
			t.Fatal(err)
		}
	}
	runRelay(t, baseConfig(dsn, c.ListenAddrs(), config.Source{Name: "orders", Table: "public.outbox", Preset: "status"}))
	recs := col.waitDistinct(t, txs*perTx, 20*time.Second)
	byKey := map[string][]int{}
	for _, r := range recs {
		var n int
		_, _ = fmt.Sscanf(string(r.Value), `{"n": %d}`, &n)
		if n == 0 {
			_, _ = fmt.Sscanf(string(r.Value), `{"n":%d}`, &n)
		}
		byKey[string(r.Key)] = append(byKey[string(r.Key)], n)
		if tp, _ := header(r, "traceparent"); tp != "00-4bf92f3577b34da6a3ce929d0e0e4736-00f067aa0ba902b7-01" {
			t.Fatalf("record %s has traceparent %q", r.Value, tp)
		}
	}
	for k, ns := range byKey {
		if !slices.IsSorted(ns) {
			t.Errorf("key %s arrived as %v, not in the order written", k, ns)
		}
	}
}

// TestOutboxLibraryPaymentsOnce: seed 003's enqueue through the outbox
// package: the participant's sequence allocated with the row, an
// instruction written again (also by eight writers at once) returns the
// first row and uses up no sequence number, so the participant's sequence
// has no gap.
func TestOutboxLibraryPaymentsOnce(t *testing.T) {
	t.Parallel()
	dsn, pool := pgtest.NewDB(t)
	if err := queue.Migrate(context.Background(), dsn, "payments"); err != nil {
		t.Fatal(err)
	}
	db, err := sql.Open("pgx", dsn)
	if err != nil {
		t.Fatal(err)
	}
	defer db.Close()
	l := outbox.Presets["payment-queue"]
	l.Table = "payments.payment_outbox_pending"
	w := outbox.New(outbox.Postgres, l)
	seq := outbox.Sequence{Function: "payments.bump_participant_outbox_seq", Participant: "participant_id", Column: "sequence_id"}
	write := func(instruction string) (string, error) {
		ctx := context.Background()
		tx, err := db.BeginTx(ctx, nil)
		if err != nil {
			return "", err
		}
		defer func() { _ = tx.Rollback() }()
		id, err := w.WriteSequenced(ctx, tx, outbox.Event{IdempotencyKey: instruction + "-key",
			Payload: `{"amount": 100, "currency": "EUR"}`,
			Columns: map[string]any{"instruction_id": instruction, "participant_id": "p1", "rail_type": "sepa"}}, seq)
		if err != nil {
			return "", err
		}
		return id, tx.Commit()
	}
	first, err := write("i1")
	if err != nil {
		t.Fatal(err)
	}
	var wg sync.WaitGroup
	ids := make([]string, 8)
	errs := make([]error, 8)
	for g := range 8 {
		wg.Go(func() { ids[g], errs[g] = write("i1") })
	}
	wg.Wait()
	for g := range 8 {
		if errs[g] != nil || ids[g] != first {
			t.Fatalf("writer %d of i1 again: %s, %v; want the first row %s", g, ids[g], errs[g], first)
		}
	}
	var racers sync.WaitGroup
	raced := make([]string, 8)
	for g := range 8 { // a new instruction, eight writers at once
		racers.Go(func() { raced[g], errs[g] = write("i2") })
	}
	racers.Wait()
	for g := range 8 {
		if errs[g] != nil || raced[g] != raced[0] {
			t.Fatalf("writer %d of i2: %s, %v; want one row for all", g, raced[g], errs[g])
		}
	}
	if _, err := write("i3"); err != nil {
		t.Fatal(err)
	}
	var seqs []int64
	rows, err := pool.Query(context.Background(), "SELECT sequence_id FROM payments.payment_outbox_pending WHERE participant_id = 'p1' ORDER BY 1")
	if err != nil {
		t.Fatal(err)
	}
	for rows.Next() {
		var s int64
		_ = rows.Scan(&s)
		seqs = append(seqs, s)
	}
	if !slices.Equal(seqs, []int64{1, 2, 3}) {
		t.Errorf("p1's sequence numbers %v, want 1, 2, 3: one row per instruction and no gap", seqs)
	}
}
