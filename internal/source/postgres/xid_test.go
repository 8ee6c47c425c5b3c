package postgres_test

import (
	"context"
	"testing"
	"time"

	"github.com/outbox-relay/outbox-relay/internal/layout"
	"github.com/outbox-relay/outbox-relay/internal/pgtest"
	"github.com/outbox-relay/outbox-relay/internal/source"
	"github.com/outbox-relay/outbox-relay/internal/source/postgres"
)

// TestXIDBarrierIgnoresClaims guards the xid8 barrier's exclusion of the
// relays' own transactions: a batch in flight (its claim locked rows, so it
// has a transaction id) must not hold back rows committed after it began,
// or batches could never overlap and a slow sink on one source would delay
// every xid source of the database.
func TestXIDBarrierIgnoresClaims(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	dsn, pool := migrated(t)
	pgtest.Exec(t, pool, `CREATE TABLE events (id BIGSERIAL PRIMARY KEY, tx XID8 NOT NULL DEFAULT pg_current_xact_id(),
  k TEXT NOT NULL, payload JSONB NOT NULL);
INSERT INTO events (k, payload) VALUES ('a', '{}')`)
	relayPool := pgtest.Pool(t, dsn, postgres.ApplicationName("xid-test"))
	tbl := postgres.Table{Schema: "public", Name: "events"}
	_, l := newStore(t, relayPool, "ev", tbl, "", layout.Spec{ID: "id", Payload: "payload", Key: "{k}", XIDColumn: "tx",
		Topic: "ev", State: layout.State{Mode: "delete"}}, true)
	st := postgres.New(relayPool, postgres.Options{Source: "ev", Table: tbl, RelaySchema: relaySchema, Layout: l, Ordering: true})
	// Other tests' transactions (the barrier spans the cluster) may hold
	// the first row back for a moment.
	var first source.Batch
	for deadline := time.Now().Add(15 * time.Second); first == nil; time.Sleep(50 * time.Millisecond) {
		b, err := st.Claim(ctx, 10)
		if err != nil {
			t.Fatal(err)
		}
		first = b
		if first == nil && time.Now().After(deadline) {
			t.Fatal("the first row was never claimable")
		}
	}
	defer func() { _ = first.Release(ctx) }()
	pgtest.Exec(t, pool, `INSERT INTO events (k, payload) VALUES ('b', '{}')`)
	// Other tests' transactions may hold the barrier back for a moment;
	// the batch in flight must not, however long it stays open.
	deadline := time.Now().Add(15 * time.Second)
	for {
		b, err := st.Claim(ctx, 10)
		if err != nil {
			t.Fatal(err)
		}
		var got []source.Row
		if b != nil {
			got = b.Rows()
			_ = b.Release(ctx)
		}
		if len(got) == 1 && got[0].OrderKey == "b" {
			return
		}
		if time.Now().After(deadline) {
			t.Fatalf("a row committed after a batch in flight began was not claimable while it stays open (claimed %d rows)", len(got))
		}
		time.Sleep(50 * time.Millisecond)
	}
}
