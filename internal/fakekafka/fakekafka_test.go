package fakekafka

import (
	"context"
	"errors"
	"testing"
	"time"

	"github.com/twmb/franz-go/pkg/kerr"
	"github.com/twmb/franz-go/pkg/kgo"
)

// TestAutoCreateFollowsTheSetting: a producer that may ask for missing
// topics (auto_create_topics) gets them from a broker started with
// autoCreate, and an unknown-topic error from one started without, as
// from a Kafka broker with auto.create.topics.enable on or off.
func TestAutoCreateFollowsTheSetting(t *testing.T) {
	t.Parallel()
	for _, autoCreate := range []bool{true, false} {
		c, err := New(autoCreate)
		if err != nil {
			t.Fatal(err)
		}
		t.Cleanup(c.Close)
		cl, err := kgo.NewClient(kgo.SeedBrokers(c.ListenAddrs()...), kgo.AllowAutoTopicCreation(),
			kgo.UnknownTopicRetries(1), kgo.RecordRetries(2))
		if err != nil {
			t.Fatal(err)
		}
		ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
		err = cl.ProduceSync(ctx, &kgo.Record{Topic: "created-on-demand", Value: []byte("x")}).FirstErr()
		cancel()
		cl.Close()
		switch {
		case autoCreate && err != nil:
			t.Errorf("auto-create on: produce to a new topic: %v", err)
		case !autoCreate && !errors.Is(err, kerr.UnknownTopicOrPartition):
			t.Errorf("auto-create off: produce to a new topic: %v, want UNKNOWN_TOPIC_OR_PARTITION", err)
		}
	}
}
