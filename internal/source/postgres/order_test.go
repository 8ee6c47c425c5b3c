package postgres_test

import (
	"context"
	"encoding/json"
	"fmt"
	"testing"
	"time"

	"github.com/outbox-relay/outbox-relay/internal/fixtures"
	"github.com/outbox-relay/outbox-relay/internal/layout"
	"github.com/outbox-relay/outbox-relay/internal/pgtest"
	"github.com/outbox-relay/outbox-relay/internal/source"
	"github.com/outbox-relay/outbox-relay/internal/source/postgres"
)

// TestSameTransactionOrder guards the claim's tie-breaker on seed 001's
// table as written (random UUID ids, created_at DEFAULT now()): rows of one
// key inserted by separate statements of one transaction share created_at,
// and are claimed in the order their statements ran, also after the first
// of them backed off and the relay updated its retry columns (which gives
// the row a new version).
func TestSameTransactionOrder(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	_, pool := migrated(t)
	pgtest.Exec(t, pool, fixtures.Seed001)
	const txs, per = 20, 3
	for i := range txs {
		tx, err := pool.Begin(ctx)
		if err != nil {
			t.Fatal(err)
		}
		for n := 1; n <= per; n++ {
			if _, err := tx.Exec(ctx, `INSERT INTO outbox (aggregate_type, aggregate_id, event_type, topic, partition_key, payload)
VALUES ('Order', gen_random_uuid(), 'order.placed', 'orders', $1, jsonb_build_object('n', $2::int))`, fmt.Sprintf("k%d", i), n); err != nil {
				t.Fatal(err)
			}
		}
		if err := tx.Commit(ctx); err != nil {
			t.Fatal(err)
		}
	}
	st, _ := newStore(t, pool, "s", postgres.Table{Schema: "public", Name: "outbox"}, "status", layout.Spec{}, true)
	inOrder := func(b source.Batch) {
		t.Helper()
		last := map[string]int{}
		for _, r := range b.Rows() {
			var p struct{ N int }
			if err := json.Unmarshal(r.Payload, &p); err != nil {
				t.Fatal(err)
			}
			if p.N <= last[r.OrderKey] {
				t.Fatalf("key %s: row %d claimed after row %d", r.OrderKey, p.N, last[r.OrderKey])
			}
			last[r.OrderKey] = p.N
		}
		if len(last) != txs {
			t.Fatalf("claimed %d keys, want %d", len(last), txs)
		}
	}
	claim := func() source.Batch {
		t.Helper()
		b, err := st.Claim(ctx, 1000)
		if err != nil || b == nil {
			t.Fatalf("claim: %v %v", b, err)
		}
		// A failed check gives the rows back (a no-op once completed).
		t.Cleanup(func() { _ = b.Release(context.Background()) })
		return b
	}
	b := claim()
	inOrder(b)
	// The first row of every key fails once and is due again at once.
	var retry []source.Retry
	for i, r := range b.Rows() {
		var p struct{ N int }
		_ = json.Unmarshal(r.Payload, &p)
		if p.N == 1 {
			retry = append(retry, source.Retry{Index: i, Attempts: 1, At: time.Now().Add(-time.Second), Err: "broker down"})
		}
	}
	if err := b.Complete(ctx, source.Outcome{Retry: retry}); err != nil {
		t.Fatal(err)
	}
	var updated int
	_ = pool.QueryRow(ctx, "SELECT count(*) FROM outbox WHERE retry_count = 1").Scan(&updated)
	if updated != txs {
		t.Fatalf("%d rows with retry_count 1, want %d", updated, txs)
	}
	b = claim()
	inOrder(b)
	if err := b.Complete(ctx, source.Outcome{Published: all(b)}); err != nil {
		t.Fatal(err)
	}
	var left int
	_ = pool.QueryRow(ctx, "SELECT count(*) FROM outbox_relay.retry_state").Scan(&left)
	if left != 0 {
		t.Fatalf("%d retry states left after every row was published", left)
	}
}

// all is every row of b, for an outcome.
func all(b source.Batch) []int {
	out := make([]int, len(b.Rows()))
	for i := range out {
		out[i] = i
	}
	return out
}

// TestColumnsSerial guards what tells check that a table proves its order:
// identity columns and sequence defaults are filled in insert order, random
// ids and timestamps are not.
func TestColumnsSerial(t *testing.T) {
	t.Parallel()
	_, pool := migrated(t)
	pgtest.Exec(t, pool, `CREATE TABLE s (a bigserial, b bigint GENERATED ALWAYS AS IDENTITY, c uuid DEFAULT gen_random_uuid(),
  d timestamptz DEFAULT now(), e bigint)`)
	cols, err := postgres.Columns(context.Background(), pool, postgres.Table{Schema: "public", Name: "s"})
	if err != nil {
		t.Fatal(err)
	}
	want := map[string]bool{"a": true, "b": true, "c": false, "d": false, "e": false}
	for _, c := range cols {
		if c.Serial != want[c.Name] {
			t.Errorf("column %s: serial %v, want %v", c.Name, c.Serial, want[c.Name])
		}
	}
}
