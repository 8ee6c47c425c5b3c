package postgres_test

import (
	"context"
	"testing"

	"github.com/outbox-relay/outbox-relay/internal/fixtures"
	"github.com/outbox-relay/outbox-relay/internal/layout"
	"github.com/outbox-relay/outbox-relay/internal/pgtest"
	"github.com/outbox-relay/outbox-relay/internal/source"
	"github.com/outbox-relay/outbox-relay/internal/source/postgres"
)

// BenchmarkClaim claims (and releases) 1,000 rows: the claim query plus row
// decoding, per row.
func BenchmarkClaim(b *testing.B) {
	ctx := context.Background()
	_, pool := migrated(b)
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

// BenchmarkClaimPriority claims (and releases) 500 rows of a 20,000-row
// backlog of seed 002's table, by the claim's order and under an event
// priority that reads 5,000 rows ahead (its default for a batch of 500),
// per row claimed.
func BenchmarkClaimPriority(b *testing.B) {
	ctx := context.Background()
	_, pool := migrated(b)
	pgtest.Exec(b, pool, fixtures.Seed002, `INSERT INTO tenant."OutboxEvent" ("id", "tenantId", "eventType", "aggregateType", "aggregateId", "payload", "createdAt")
SELECT 'ev' || lpad(i::text, 6, '0'), 'acme', (ARRAY['kitchen.task.progress', 'event.board.updated', 'scheduling.shift.assigned'])[1 + i % 3],
  'Aggregate', 'agg-' || (i % 2000), jsonb_build_object('i', i), timestamp '2026-01-30 12:00' + i * interval '1 millisecond'
FROM generate_series(1, 20000) i`)
	tbl := postgres.Table{Schema: "tenant", Name: "OutboxEvent"}
	for _, prio := range []*source.Priority{nil, {Column: "eventType", Classes: []string{"kitchen.task.*", "event.*"}, Lookahead: 5000}} {
		name := "order"
		if prio != nil {
			name = "priority"
		}
		b.Run(name, func(b *testing.B) {
			_, l := newStore(b, pool, "bench", tbl, "prisma", layout.Spec{}, true)
			st := postgres.New(pool, postgres.Options{Source: "bench", Table: tbl, RelaySchema: relaySchema, Layout: l, Ordering: true, Priority: prio})
			for b.Loop() {
				batch, err := st.Claim(ctx, 500)
				if err != nil || batch == nil || len(batch.Rows()) != 500 {
					b.Fatalf("claim: %v", err)
				}
				_ = batch.Release(ctx)
			}
			b.ReportMetric(float64(b.Elapsed().Nanoseconds())/float64(b.N*500), "ns/row")
		})
	}
}
