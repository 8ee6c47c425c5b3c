package kafka

import (
	"slices"
	"testing"

	"github.com/twmb/franz-go/pkg/kfake"
	"github.com/twmb/franz-go/pkg/kgo"
	"github.com/twmb/franz-go/pkg/kmsg"

	"github.com/outbox-relay/outbox-relay/internal/sink"
)

// commitProgress publishes one message through producer 0 of s and
// commits it with ids as the batch's delivered events, then confirms it.
func commitProgress(t *testing.T, s *Shard, ids ...string) {
	t.Helper()
	ctx := testCtx(t)
	p, err := s.Begin(ctx, 0)
	if err != nil {
		t.Fatal(err)
	}
	for _, err := range p.Publish(ctx, []*sink.Message{msg(ids[0], "", []byte(`{}`))}) {
		if err != nil {
			t.Fatal(err)
		}
	}
	n, err := s.Commit(ctx, 0, ids, false)
	if err != nil {
		t.Fatal(err)
	}
	s.Confirm(0, n)
}

// TestRecoverReadsPastAnotherOpenTransaction: another shard's producer has
// a transaction open on the progress topic, holding its last stable offset
// back, and the shard's latest record was committed after it began. The
// takeover must still find that record: reading only to the last stable
// offset returned the one before, and its events would have been sent
// again.
func TestRecoverReadsPastAnotherOpenTransaction(t *testing.T) {
	t.Parallel()
	const topic = "progress"
	c, err := kfake.NewCluster(kfake.NumBrokers(1), kfake.SeedTopics(1, "t", topic))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(c.Close)
	cfg := testConfig(c)
	newShard := func() *Shard {
		s, err := NewShard(cfg, "outbox-relay.test.src", topic, 1, fastOpts)
		if err != nil {
			t.Fatal(err)
		}
		t.Cleanup(func() { _ = s.Close(testCtx(t)) })
		return s
	}
	first := newShard()
	if _, err := first.Recover(testCtx(t)); err != nil {
		t.Fatal(err)
	}
	commitProgress(t, first, "a")

	// Another source's batch: its progress record written, its commit not yet.
	other := newClient(t, c, kgo.TransactionalID("outbox-relay.test.other-0"), kgo.DefaultProduceTopic(topic))
	if err := other.BeginTransaction(); err != nil {
		t.Fatal(err)
	}
	if err := other.ProduceSync(testCtx(t), &kgo.Record{Key: []byte("outbox-relay.test.other-0"), Value: []byte(`{"ids":["x"]}`)}).FirstErr(); err != nil {
		t.Fatal(err)
	}
	commitProgress(t, first, "b")

	// The other transaction commits once the takeover has listed the
	// topic's offsets: an end taken at the last stable offset would be
	// before "b".
	listed := make(chan struct{})
	c.ControlKey(int16(kmsg.ListOffsets), func(kmsg.Request) (kmsg.Response, error, bool) {
		c.DropControl()
		close(listed)
		return nil, nil, false
	})
	got := make(chan []string, 1)
	errs := make(chan error, 1)
	second := newShard()
	go func() {
		ids, err := second.Recover(testCtx(t))
		errs <- err
		got <- ids
	}()
	<-listed
	if err := other.EndTransaction(testCtx(t), kgo.TryCommit); err != nil {
		t.Fatal(err)
	}
	if err := <-errs; err != nil {
		t.Fatal(err)
	}
	if ids := <-got; !slices.Equal(ids, []string{"b"}) {
		t.Fatalf("recovered progress %q, want the latest record's [b]", ids)
	}
}
