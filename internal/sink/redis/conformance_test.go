package redis

import (
	"context"
	"testing"

	"github.com/outbox-relay/outbox-relay/internal/sink"
	"github.com/outbox-relay/outbox-relay/internal/sink/sinktest"
)

// TestConformance runs the sink conformance suite against the local Redis
// server; connection cuts go through the suite's proxy.
func TestConformance(t *testing.T) {
	requireServer(t)
	sinktest.Run(t, sinktest.Harness{
		Addr: serverAddr(),
		New: func(t *testing.T, addr string) sink.Publisher {
			p, err := New(testConfig(addr))
			if err != nil {
				t.Fatal(err)
			}
			return p
		},
		Destination: func(t *testing.T) (string, sinktest.Reader) {
			c := admin(t)
			stream := newKey(t, c, "stream")
			var got []sinktest.Received
			last := ""
			return stream, func(ctx context.Context) ([]sinktest.Received, error) {
				es, err := entries(ctx, c, stream, last)
				for _, e := range es {
					got = append(got, received(e))
					last = e.ID
				}
				return got, err
			}
		},
		// A key holding a string: XADD answers WRONGTYPE.
		Unroutable: func(t *testing.T) string {
			c := admin(t)
			k := newKey(t, c, "string")
			if err := c.Set(t.Context(), k, "not a stream", 0).Err(); err != nil {
				t.Fatal(err)
			}
			return k
		},
		Keys: true,
	})
}
