package mysql_test

import (
	"context"
	"testing"

	"github.com/outbox-relay/outbox-relay/internal/source"
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
