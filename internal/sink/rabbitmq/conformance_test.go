package rabbitmq

import (
	"context"
	"testing"

	"github.com/outbox-relay/outbox-relay/internal/sink"
	"github.com/outbox-relay/outbox-relay/internal/sink/sinktest"
)

// TestConformance runs the sink conformance suite against the local
// RabbitMQ; the suite puts its cutting proxy in front of it. Each
// destination is a fresh exchange with a queue bound for routing key
// "events"; the unroutable one is an exchange with no binding.
func TestConformance(t *testing.T) {
	t.Run("one of a key in flight", func(t *testing.T) { conformance(t, 1) })
	t.Run("eight of a key in flight", func(t *testing.T) { conformance(t, 8) })
}

func conformance(t *testing.T, perKey int) {
	a := newAdmin(t)
	sinktest.Run(t, sinktest.Harness{
		Addr: testAddr(),
		New: func(t *testing.T, addr string) sink.Publisher {
			cfg := testConfig(addr)
			cfg.MaxInFlightPerKey = perKey
			return newPublisher(t, cfg)
		},
		Destination: func(t *testing.T) (string, sinktest.Reader) {
			ex := a.exchange(t, "conformance")
			read := a.consume(t, a.queue(t, ex, "events", nil))
			return ex + "/events", func(context.Context) ([]sinktest.Received, error) {
				var out []sinktest.Received
				for _, d := range read() {
					out = append(out, received(d))
				}
				return out, nil
			}
		},
		Unroutable: func(t *testing.T) string { return a.exchange(t, "unbound") + "/events" },
		Keys:       true,
	})
}
