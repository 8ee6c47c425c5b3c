package nats

import (
	"context"
	"testing"

	"github.com/outbox-relay/outbox-relay/internal/sink"
	"github.com/outbox-relay/outbox-relay/internal/sink/sinktest"
)

// TestConformance runs the sink conformance suite against the local NATS
// server; connection cuts go through the suite's proxy.
func TestConformance(t *testing.T) {
	requireServer(t)
	t.Run("one of a key pending", func(t *testing.T) { conformance(t, 1) })
	t.Run("eight of a key pending", func(t *testing.T) { conformance(t, 8) })
}

func conformance(t *testing.T, perKey int) {
	sinktest.Run(t, sinktest.Harness{
		Addr: serverAddr(),
		New: func(t *testing.T, addr string) sink.Publisher {
			cfg := testConfig(addr)
			cfg.MaxPendingPerKey = perKey
			p, err := New(cfg)
			if err != nil {
				t.Fatal(err)
			}
			return p
		},
		Destination: func(t *testing.T) (string, sinktest.Reader) {
			s := newStream(t)
			var got []sinktest.Received
			next := uint64(1)
			return s.subject("events"), func(ctx context.Context) ([]sinktest.Received, error) {
				ms, err := s.read(ctx, next)
				for _, m := range ms {
					got = append(got, received(m))
				}
				next += uint64(len(ms))
				return got, err
			}
		},
		// No stream captures this subject.
		Unroutable: func(t *testing.T) string { return "outbox-test-nostream-" + suffix() + ".events" },
		Keys:       true,
	})
}
