package mysql_test

import (
	"context"
	"fmt"
	"testing"

	"github.com/outbox-relay/outbox-relay/internal/source"
	"github.com/outbox-relay/outbox-relay/internal/source/mysql"
)

// BenchmarkClaimAck claims 500 rows and acknowledges them (push_completed_at
// set), the relay's hot loop; the table is refilled outside the timer when
// it runs dry. The fill uses MariaDB's sequence tables.
func BenchmarkClaimAck(b *testing.B) {
	ctx := context.Background()
	e := newEnv(b)
	e.exec(b, kafkaOutbox)
	fill := func() {
		e.exec(b, `INSERT INTO kafka_outbox (topic, payload_json, `+"`key`"+`, payload_headers)
SELECT 'orders', CONCAT('{"i": ', seq, ', "pad": "', REPEAT('x', 150), '"}'), CONCAT('k-', seq % 100), '{"traceId": "4bf92f3577b34da6"}'
FROM seq_1_to_5000`)
	}
	fill()
	st, _ := e.store(b, e.db, "bench", "kafka_outbox", "", kafkaLayout, true)
	b.ReportAllocs()
	rows := 0
	for b.Loop() {
		batch, err := st.Claim(ctx, 500)
		if err != nil {
			b.Fatalf("claim: %v", err)
		}
		if batch == nil {
			b.StopTimer()
			fill()
			b.StartTimer()
			continue
		}
		idx := make([]int, len(batch.Rows()))
		for i := range idx {
			idx[i] = i
		}
		rows += len(idx)
		if err := batch.Complete(ctx, source.Outcome{Published: idx}); err != nil {
			b.Fatal(err)
		}
	}
	if rows > 0 {
		b.ReportMetric(float64(b.Elapsed().Nanoseconds())/float64(rows), "ns/row")
	}
}

// BenchmarkClaimPriority claims (and releases) 500 rows of a 20,000-row
// backlog of the status layout's table, by the claim's order and under an
// event priority that reads 5,000 rows ahead (its default for a batch of
// 500), per row claimed.
func BenchmarkClaimPriority(b *testing.B) {
	ctx := context.Background()
	e := newEnv(b)
	e.exec(b, fmt.Sprintf(mysql.StatusTable, "outbox"), `INSERT INTO outbox (id, aggregate_id, event_type, topic, payload, created_at)
SELECT UUID(), CONCAT('agg-', seq % 2000), ELT(1 + seq % 3, 'kitchen.task.progress', 'event.board.updated', 'scheduling.shift.assigned'),
  'events', JSON_OBJECT('i', seq), TIMESTAMP '2026-01-30 12:00:00' + INTERVAL seq * 1000 MICROSECOND
FROM seq_1_to_20000`)
	for _, prio := range []*source.Priority{nil, {Column: "event_type", Classes: []string{"kitchen.task.*", "event.*"}, Lookahead: 5000}} {
		name := "order"
		if prio != nil {
			name = "priority"
		}
		b.Run(name, func(b *testing.B) {
			st := e.priorityStore(b, "outbox", "status", prio)
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
