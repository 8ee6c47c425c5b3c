package redis

import (
	"fmt"
	"testing"
	"time"

	"github.com/outbox-relay/outbox-relay/internal/sink"
)

// BenchmarkPublish publishes batches of 500 messages of 1 KiB in one
// pipeline each and reports messages per second. The stream is capped so
// a long run does not fill the shared server.
func BenchmarkPublish(b *testing.B) {
	c := admin(b)
	stream := newKey(b, c, "bench")
	cfg := testConfig(serverAddr())
	cfg.MaxLen = 10_000
	p := newPublisher(b, cfg)
	payload := make([]byte, 1024)
	msgs := make([]*sink.Message, 500)
	start := time.Now()
	b.ResetTimer()
	for n := range b.N {
		for i := range msgs {
			id := fmt.Sprintf("%d-%d", n, i)
			msgs[i] = &sink.Message{ID: id, Destination: stream, Key: fmt.Appendf(nil, "k%d", i%50),
				Payload: payload, Headers: []sink.Header{{Key: "event_id", Value: []byte(id)}}}
		}
		for i, err := range p.Publish(b.Context(), msgs) {
			if err != nil {
				b.Fatalf("message %d: %v", i, err)
			}
		}
	}
	b.ReportMetric(float64(b.N*len(msgs))/time.Since(start).Seconds(), "msgs/s")
}
