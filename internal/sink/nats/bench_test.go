package nats

import (
	"fmt"
	"testing"
	"time"

	"github.com/nats-io/nats.go/jetstream"

	"github.com/outbox-relay/outbox-relay/internal/sink"
)

// BenchmarkPublish publishes batches of 500 messages of 1 KiB, spread over
// 500 keys (fully pipelined) or 10 keys (ten chains of 50), and reports
// messages per second.
func BenchmarkPublish(b *testing.B) {
	for _, keys := range []int{500, 10} {
		b.Run(fmt.Sprintf("keys=%d", keys), func(b *testing.B) {
			s := newStream(b, func(c *jetstream.StreamConfig) { c.MaxMsgs = 100_000 })
			p := newPublisher(b, testConfig(serverAddr()))
			payload := make([]byte, 1024)
			msgs := make([]*sink.Message, 500)
			start := time.Now()
			b.ResetTimer()
			for n := range b.N {
				for i := range msgs {
					id := fmt.Sprintf("%d-%d", n, i)
					msgs[i] = &sink.Message{ID: id, Destination: s.subject("bench"),
						Key: fmt.Appendf(nil, "k%d", i%keys), Payload: payload,
						Headers: []sink.Header{{Key: "event_id", Value: []byte(id)}}}
				}
				for i, err := range p.Publish(b.Context(), msgs) {
					if err != nil {
						b.Fatalf("message %d: %v", i, err)
					}
				}
			}
			b.ReportMetric(float64(b.N*len(msgs))/time.Since(start).Seconds(), "msgs/s")
		})
	}
}
