package kafka

import (
	"context"
	"errors"
	"fmt"
	"sync/atomic"
	"testing"
	"time"

	"github.com/twmb/franz-go/pkg/kadm"
	"github.com/twmb/franz-go/pkg/kerr"
	"github.com/twmb/franz-go/pkg/kfake"
	"github.com/twmb/franz-go/pkg/kgo"
	"github.com/twmb/franz-go/pkg/kmsg"

	"github.com/outbox-relay/outbox-relay/internal/sink"
	"github.com/outbox-relay/outbox-relay/internal/sink/sinktest"
)

// TestConformance runs the sink conformance suite against kfake. Kafka
// clients learn broker addresses from metadata, so a cut is made inside the
// broker: its produce requests fail by closing the connection.
func TestConformance(t *testing.T) {
	c := newCluster(t)
	var topics atomic.Int64
	sinktest.Run(t, sinktest.Harness{
		Addr: c.ListenAddrs()[0],
		New: func(t *testing.T, addr string) sink.Publisher {
			cfg := testConfig(c)
			cfg.Brokers = []string{addr}
			p, err := New(cfg, fastOpts)
			if err != nil {
				t.Fatal(err)
			}
			return p
		},
		Destination: func(t *testing.T) (string, sinktest.Reader) {
			topic := fmt.Sprintf("conformance-%d", topics.Add(1))
			adm := kadm.NewClient(newClient(t, c))
			if _, err := adm.CreateTopic(testCtx(t), testPartitions, 1, nil, topic); err != nil {
				t.Fatal(err)
			}
			cl := newClient(t, c, kgo.ConsumeTopics(topic),
				kgo.ConsumeResetOffset(kgo.NewOffset().AtStart()), kgo.FetchMaxWait(50*time.Millisecond))
			var got []sinktest.Received
			return topic, func(ctx context.Context) ([]sinktest.Received, error) {
				ctx, cancel := context.WithTimeout(ctx, 100*time.Millisecond)
				defer cancel()
				fs := cl.PollFetches(ctx)
				if err := fs.Err0(); err != nil && !errors.Is(err, context.DeadlineExceeded) {
					return got, err
				}
				fs.EachRecord(func(r *kgo.Record) {
					rc := sinktest.Received{ID: headerValue(r, "event_id"), Key: r.Key, Payload: r.Value}
					for _, h := range r.Headers {
						rc.Headers = append(rc.Headers, sink.Header{Key: h.Key, Value: h.Value})
					}
					got = append(got, rc)
				})
				return got, nil
			}
		},
		// A topic the broker refuses for good (a missing topic is
		// retried: see TestPublishUnknownTopic).
		Unroutable: func(t *testing.T) string {
			topic := fmt.Sprintf("refused-%d", topics.Add(1))
			adm := kadm.NewClient(newClient(t, c))
			if _, err := adm.CreateTopic(testCtx(t), testPartitions, 1, nil, topic); err != nil {
				t.Fatal(err)
			}
			c.Fault(kfake.Fault{Keys: []kmsg.Key{kmsg.Produce}, Topic: topic, Err: kerr.InvalidTopicException, Count: -1})
			return topic
		},
		Keys:    true,
		NoProxy: true,
		Cut: func(t *testing.T, d time.Duration) {
			until := time.Now().Add(d)
			c.ControlKey(int16(kmsg.Produce), func(kmsg.Request) (kmsg.Response, error, bool) {
				c.KeepControl()
				if time.Now().Before(until) {
					return nil, errors.New("connection cut"), true
				}
				return nil, nil, false
			})
		},
	})
}

func newClient(t *testing.T, c *kfake.Cluster, opts ...kgo.Opt) *kgo.Client {
	t.Helper()
	cl, err := kgo.NewClient(append([]kgo.Opt{kgo.SeedBrokers(c.ListenAddrs()...)}, opts...)...)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(cl.Close)
	return cl
}
