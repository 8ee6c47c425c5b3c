package postgres_test

import (
	"context"
	"slices"
	"testing"

	"github.com/outbox-relay/outbox-relay/internal/layout"
	"github.com/outbox-relay/outbox-relay/internal/pgtest"
	"github.com/outbox-relay/outbox-relay/internal/source"
	"github.com/outbox-relay/outbox-relay/internal/source/postgres"
)

// TestBucketClaimHoldsKeysOfRowsItCannotLock: a claim of a bucket passes
// over the rows it sees locked, and tries the others; a row it tries and
// cannot lock holds its key too. A row locked in a subtransaction is one
// the claim does not see locked (its xmax is the subtransaction's): the
// claim must still leave the later rows of its key, and take those of the
// other keys.
func TestBucketClaimHoldsKeysOfRowsItCannotLock(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	_, pool := migrated(t)
	pgtest.Exec(t, pool, `CREATE TABLE public.outbox (id bigserial PRIMARY KEY, topic text, key text, payload jsonb NOT NULL);
INSERT INTO public.outbox (topic, key, payload) SELECT 't', 'k' || (g % 8), '{}' FROM generate_series(0, 23) g`)
	tbl := postgres.Table{Schema: "public", Name: "outbox"}
	bk := source.Bucket{Index: 0, Count: 2}
	type row struct{ id, key string }
	var rows []row
	r, err := pool.Query(ctx, "SELECT o.id::text, o.key FROM public.outbox o ORDER BY o.id")
	if err != nil {
		t.Fatal(err)
	}
	for r.Next() {
		var x row
		if err := r.Scan(&x.id, &x.key); err != nil {
			t.Fatal(err)
		}
		if source.BucketOf(x.key, bk.Count) == bk.Index {
			rows = append(rows, x)
		}
	}
	if r.Err() != nil || len(rows) < 6 {
		t.Fatalf("rows of bucket %s: %v (%v)", bk, rows, r.Err())
	}
	// Another transaction locks the bucket's first row in a subtransaction.
	held := rows[0]
	tx, err := pool.Begin(ctx)
	if err != nil {
		t.Fatal(err)
	}
	defer func() { _ = tx.Rollback(ctx) }()
	if _, err := tx.Exec(ctx, "SAVEPOINT s; SELECT 1 FROM public.outbox WHERE id = "+held.id+" FOR UPDATE"); err != nil {
		t.Fatal(err)
	}
	_, l := newStore(t, pool, "passed", tbl, "delete", layout.Spec{}, true)
	st := postgres.New(pool, postgres.Options{Source: "passed", Table: tbl, RelaySchema: relaySchema, Layout: l, Ordering: true, Bucket: bk})
	b, err := st.Claim(ctx, len(rows))
	if err != nil {
		t.Fatal(err)
	}
	if b == nil {
		t.Fatal("nothing claimed")
	}
	defer func() { _ = b.Release(ctx) }()
	var want []string
	for _, x := range rows {
		if x.key != held.key {
			want = append(want, x.id)
		}
	}
	var got []string
	for _, x := range b.Rows() {
		got = append(got, x.ID)
	}
	if !slices.Equal(got, want) {
		t.Fatalf("claimed %v, want %v: every row of the bucket but those of key %s, whose first row another transaction locks",
			got, want, held.key)
	}
}
