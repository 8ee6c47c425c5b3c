package mqtt

import (
	"bytes"
	"fmt"
	"testing"

	"github.com/outbox-relay/outbox-relay/internal/sink"
)

// BenchmarkPublish publishes batches of 500 messages of 1 KiB over 50 keys
// to a topic nobody subscribes to.
func BenchmarkPublish(b *testing.B) {
	p := newPublisher(b, testConfig(testAddr()))
	topic := "outbox-relay-bench/" + suffix()
	payload := bytes.Repeat([]byte("x"), 1024)
	msgs := make([]*sink.Message, 500)
	for i := range msgs {
		id := fmt.Sprint(i)
		msgs[i] = &sink.Message{ID: id, Destination: topic, Key: fmt.Appendf(nil, "key-%d", i%50),
			Headers: []sink.Header{{Key: "event_id", Value: []byte(id)}}, Payload: payload}
	}
	b.SetBytes(int64(len(msgs) * len(payload)))
	b.ResetTimer()
	for b.Loop() {
		for i, err := range p.Publish(b.Context(), msgs) {
			if err != nil {
				b.Fatalf("message %d: %v", i, err)
			}
		}
	}
	b.ReportMetric(float64(b.N*len(msgs))/b.Elapsed().Seconds(), "msgs/s")
}
