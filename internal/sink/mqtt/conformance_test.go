package mqtt

import (
	"context"
	"testing"

	"github.com/outbox-relay/outbox-relay/internal/sink"
	"github.com/outbox-relay/outbox-relay/internal/sink/sinktest"
)

// TestConformance runs the sink conformance suite against the local
// Mosquitto through the suite's cutting proxy. Each destination is a topic
// under a prefix of its own, read by a QoS 1 subscriber. MQTT has no
// destination the server refuses for good, so the unroutable one is a
// topic with a wildcard, which the sink refuses before sending.
func TestConformance(t *testing.T) {
	sinktest.Run(t, sinktest.Harness{
		Addr: testAddr(),
		New: func(t *testing.T, addr string) sink.Publisher {
			return newPublisher(t, testConfig(addr))
		},
		Destination: func(t *testing.T) (string, sinktest.Reader) {
			sub := subscribe(t)
			return sub.prefix + "/events", func(context.Context) ([]sinktest.Received, error) {
				var out []sinktest.Received
				for _, p := range sub.messages() {
					out = append(out, received(p))
				}
				return out, nil
			}
		},
		Unroutable: func(t *testing.T) string { return "outbox-relay-test/" + suffix() + "/+/events" },
		Keys:       true,
	})
}
