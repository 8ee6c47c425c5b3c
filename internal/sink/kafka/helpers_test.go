package kafka

import (
	"context"
	"fmt"
	"testing"
	"time"

	"github.com/twmb/franz-go/pkg/kadm"
	"github.com/twmb/franz-go/pkg/kfake"
	"github.com/twmb/franz-go/pkg/kgo"

	"github.com/outbox-relay/outbox-relay/internal/config"
	"github.com/outbox-relay/outbox-relay/internal/sink"
)

const testPartitions = 3

// Partition keys from the Java vectors and where Java puts them among
// testPartitions partitions.
var (
	keyOn0 = "21"                       // partition 0
	keyOn2 = "a-little-bit-long-string" // partition 2
)

func newCluster(t *testing.T, opts ...kfake.Opt) *kfake.Cluster {
	t.Helper()
	opts = append([]kfake.Opt{kfake.NumBrokers(1), kfake.SeedTopics(testPartitions, "t")}, opts...)
	c, err := kfake.NewCluster(opts...)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(c.Close)
	return c
}

// testConfig is a sink configuration for c with fast retries.
func testConfig(c *kfake.Cluster) config.Sink {
	return config.Sink{
		Type:            "kafka",
		Brokers:         c.ListenAddrs(),
		MaxMessageBytes: 1 << 20,
		DeliveryTimeout: config.Duration(20 * time.Second),
		RecordRetries:   2,
		Compression:     "none",
	}
}

// fastOpts keep the client's waits short against an in-process broker.
var fastOpts = WithKgoOpts(
	kgo.RetryBackoffFn(func(int) time.Duration { return 5 * time.Millisecond }),
	kgo.MetadataMinAge(10*time.Millisecond),
)

func newPublisher(t *testing.T, cfg config.Sink, opts ...Option) *Publisher {
	t.Helper()
	p, err := New(cfg, append([]Option{fastOpts}, opts...)...)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = p.Close(context.Background()) })
	return p
}

func testCtx(t *testing.T) context.Context {
	ctx, cancel := context.WithTimeout(t.Context(), 30*time.Second)
	t.Cleanup(cancel)
	return ctx
}

func msg(id, partitionKey string, payload []byte) *sink.Message {
	m := &sink.Message{ID: id, Destination: "t", Key: []byte("key-" + id), Payload: payload}
	if partitionKey != "" {
		m.PartitionKey = []byte(partitionKey)
	}
	return m
}

// endOffsets returns how many records each partition of topic holds.
func endOffsets(t *testing.T, c *kfake.Cluster, topic string) map[int32]int64 {
	t.Helper()
	cl, err := kgo.NewClient(kgo.SeedBrokers(c.ListenAddrs()...))
	if err != nil {
		t.Fatal(err)
	}
	defer cl.Close()
	listed, err := kadm.NewClient(cl).ListEndOffsets(testCtx(t), topic)
	if err != nil {
		t.Fatal(err)
	}
	ends := make(map[int32]int64)
	listed.Each(func(o kadm.ListedOffset) {
		if o.Err != nil {
			t.Fatalf("end offset of %s/%d: %v", o.Topic, o.Partition, o.Err)
		}
		ends[o.Partition] = o.Offset
	})
	return ends
}

// consume reads n records of topic from the start.
func consume(t *testing.T, c *kfake.Cluster, topic string, n int) []*kgo.Record {
	t.Helper()
	cl, err := kgo.NewClient(
		kgo.SeedBrokers(c.ListenAddrs()...),
		kgo.ConsumeTopics(topic),
		kgo.ConsumeResetOffset(kgo.NewOffset().AtStart()),
		kgo.FetchMaxWait(100*time.Millisecond),
	)
	if err != nil {
		t.Fatal(err)
	}
	defer cl.Close()
	ctx := testCtx(t)
	var recs []*kgo.Record
	for len(recs) < n {
		fs := cl.PollFetches(ctx)
		if err := ctx.Err(); err != nil {
			t.Fatalf("consumed %d of %d records: %v", len(recs), n, err)
		}
		fs.EachError(func(topic string, p int32, err error) { t.Fatalf("fetch %s/%d: %v", topic, p, err) })
		recs = append(recs, fs.Records()...)
	}
	return recs
}

func headerValue(r *kgo.Record, key string) string {
	for _, h := range r.Headers {
		if h.Key == key {
			return string(h.Value)
		}
	}
	return ""
}

func payload(n int, tag string) []byte {
	b := make([]byte, n)
	for i := range b {
		b[i] = 'x'
	}
	copy(b, fmt.Sprintf("%s|", tag))
	return b
}
