package postgres_test

import (
	"context"
	"testing"

	"github.com/outbox-relay/outbox-relay/internal/fixtures"
	"github.com/outbox-relay/outbox-relay/internal/layout"
	"github.com/outbox-relay/outbox-relay/internal/pgtest"
	"github.com/outbox-relay/outbox-relay/internal/source/postgres"
)

// BenchmarkClaim claims (and releases) 1,000 rows: the claim query plus row
// decoding, per row.
func BenchmarkClaim(b *testing.B) {
	ctx := context.Background()
	dsn, pool := pgtest.NewDB(b)
	m, err := postgres.NewMigrator(dsn, relaySchema)
	if err != nil {
		b.Fatal(err)
	}
	defer m.Close()
	if err := m.Up(ctx); err != nil {
		b.Fatal(err)
	}
	pgtest.Exec(b, pool, fixtures.Seed001, `INSERT INTO outbox (aggregate_type, aggregate_id, event_type, topic, partition_key, payload, headers)
SELECT 'Order', gen_random_uuid(), 'order.created', 'orders', 'p-' || (i % 100), jsonb_build_object('i', i, 'pad', repeat('x', 150)),
  '{"traceId": "4bf92f3577b34da6"}' FROM generate_series(1, 1000) i`, "VACUUM ANALYZE outbox")
	st, _ := newStore(b, pool, "bench", postgres.Table{Schema: "public", Name: "outbox"}, "status", layout.Spec{}, true)
	b.ReportAllocs()
	for b.Loop() {
		batch, err := st.Claim(ctx, 1000)
		if err != nil || batch == nil || len(batch.Rows()) != 1000 {
			b.Fatalf("claim: %v", err)
		}
		_ = batch.Release(ctx)
	}
	b.ReportMetric(float64(b.Elapsed().Nanoseconds())/float64(b.N*1000), "ns/row")
}
