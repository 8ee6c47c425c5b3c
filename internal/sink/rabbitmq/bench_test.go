package rabbitmq

import (
	"bytes"
	"fmt"
	"testing"

	amqp "github.com/rabbitmq/amqp091-go"

	"github.com/outbox-relay/outbox-relay/internal/sink"
)

// BenchmarkPublish publishes batches of 500 messages of 1 KiB over 50 keys
// to a queue that keeps only the newest 10,000.
func BenchmarkPublish(b *testing.B) {
	a := newAdmin(b)
	ex := a.exchange(b, "bench")
	a.queue(b, ex, "rk", amqp.Table{"x-max-length": int32(10000)})
	p := newPublisher(b, testConfig(testAddr()))
	payload := bytes.Repeat([]byte("x"), 1024)
	msgs := make([]*sink.Message, 500)
	for i := range msgs {
		id := fmt.Sprint(i)
		msgs[i] = &sink.Message{ID: id, Destination: ex + "/rk", Key: fmt.Appendf(nil, "key-%d", i%50),
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

// BenchmarkPublishHotKey publishes batches of 500 messages of one key, one
// and then 32 of them unconfirmed at once.
func BenchmarkPublishHotKey(b *testing.B) {
	for _, perKey := range []int{1, 32} {
		b.Run(fmt.Sprintf("in_flight_per_key=%d", perKey), func(b *testing.B) {
			a := newAdmin(b)
			ex := a.exchange(b, "hot")
			a.queue(b, ex, "rk", amqp.Table{"x-max-length": int32(10000)})
			cfg := testConfig(testAddr())
			cfg.MaxInFlightPerKey = perKey
			p := newPublisher(b, cfg)
			msgs := make([]*sink.Message, 500)
			for i := range msgs {
				id := fmt.Sprint(i)
				msgs[i] = &sink.Message{ID: id, Destination: ex + "/rk", Key: []byte("hot"),
					Headers: []sink.Header{{Key: "event_id", Value: []byte(id)}}, Payload: []byte(`{"n":1}`)}
			}
			for b.Loop() {
				for i, err := range p.Publish(b.Context(), msgs) {
					if err != nil {
						b.Fatalf("message %d: %v", i, err)
					}
				}
			}
			b.ReportMetric(float64(b.N*len(msgs))/b.Elapsed().Seconds(), "msgs/s")
		})
	}
}
