package webhook

import (
	"context"
	"testing"

	"github.com/outbox-relay/outbox-relay/internal/sink"
	"github.com/outbox-relay/outbox-relay/internal/sink/sinktest"
)

// TestConformance runs the sink conformance suite against a webhook
// receiver on localhost, reached through the suite's cutting proxy in the
// connection-cut test. Destinations are paths under /hooks/; "gone-" paths
// answer 404.
func TestConformance(t *testing.T) {
	rc := newReceiver(t)
	sinktest.Run(t, sinktest.Harness{
		Addr: rc.addr(),
		New: func(t *testing.T, addr string) sink.Publisher {
			p, err := New(Config{URL: hookURL(addr)})
			if err != nil {
				t.Fatal(err)
			}
			return p
		},
		Destination: func(t *testing.T) (string, sinktest.Reader) {
			dest := "conformance-" + suffix()
			return dest, func(context.Context) ([]sinktest.Received, error) {
				var out []sinktest.Received
				for _, r := range rc.requests(dest) {
					out = append(out, received(r))
				}
				return out, nil
			}
		},
		Unroutable: func(t *testing.T) string { return "gone-" + suffix() },
		Keys:       true,
	})
}

// TestConformanceAbly runs the suite against the Ably stand-in: the preset
// carries ids, headers and payloads in Ably's message shape.
func TestConformanceAbly(t *testing.T) {
	as := newAblyServer(t)
	sinktest.Run(t, sinktest.Harness{
		Addr: as.addr(),
		New: func(t *testing.T, addr string) sink.Publisher {
			p, err := New(Config{Preset: PresetAbly, Ably: Ably{APIKey: testAblyKey, BaseURL: "http://" + addr}})
			if err != nil {
				t.Fatal(err)
			}
			return p
		},
		Destination: func(t *testing.T) (string, sinktest.Reader) {
			channel := "tenant:" + suffix()
			return channel, func(context.Context) ([]sinktest.Received, error) {
				var out []sinktest.Received
				for _, m := range as.messages(channel) {
					out = append(out, m.received())
				}
				return out, nil
			}
		},
		// Ably refuses an invalid channel name with 400 / 40010.
		Unroutable: func(t *testing.T) string { return invalidChannelPrefix + suffix() },
	})
}
