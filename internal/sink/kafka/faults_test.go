package kafka

import (
	"bytes"
	"context"
	"errors"
	"testing"
	"time"

	"github.com/twmb/franz-go/pkg/kerr"
	"github.com/twmb/franz-go/pkg/kfake"
	"github.com/twmb/franz-go/pkg/kgo"
	"github.com/twmb/franz-go/pkg/kmsg"

	"github.com/outbox-relay/outbox-relay/internal/sink"
)

// TestPublishRetryableAfterRetries fails every produce to partition 2 with a
// retriable error: its messages fail retryably once RecordRetries are spent,
// the other partitions are delivered.
func TestPublishRetryableAfterRetries(t *testing.T) {
	t.Parallel()
	c := newCluster(t)
	fault := c.Fault(kfake.Fault{
		Keys: []kmsg.Key{kmsg.Produce}, Topic: "t", Partitions: []int32{2},
		Err: kerr.NotEnoughReplicas, Count: -1,
	})
	p := newPublisher(t, testConfig(c))

	msgs := []*sink.Message{
		msg("a", keyOn2, []byte("a")), msg("b", keyOn0, []byte("b")), msg("c", keyOn2, []byte("c")),
	}
	errs := p.Publish(testCtx(t), msgs)
	for _, i := range []int{0, 2} {
		if errs[i] == nil || sink.IsTerminal(errs[i]) {
			t.Fatalf("message %d: want a retryable error, got %v", i, errs[i])
		}
		if !errors.Is(errs[i], kerr.NotEnoughReplicas) && !errors.Is(errs[i], kgo.ErrRecordRetries) {
			t.Errorf("message %d: unexpected cause %v", i, errs[i])
		}
	}
	if errs[1] != nil {
		t.Fatalf("healthy partition: %v", errs[1])
	}
	// One try plus RecordRetries retries.
	if n := fault.Hits(); n != 3 {
		t.Errorf("%d produce requests faulted, want 3", n)
	}
	if ends := endOffsets(t, c, "t"); ends[2] != 0 || ends[0] != 1 {
		t.Fatalf("end offsets %v", ends)
	}
}

// TestPublishGapless fails only as many produce requests to partition 2 as
// it takes to exhaust the retries of its first batch. The later batches of
// the partition would then be accepted, yet none of them may be delivered:
// the engine relies on a failure never being followed by a success of the
// same key within a call.
func TestPublishGapless(t *testing.T) {
	t.Parallel()
	c := newCluster(t)
	cfg := testConfig(c)
	cfg.MaxMessageBytes = 1024 // about three of these records per batch
	c.Fault(kfake.Fault{
		Keys: []kmsg.Key{kmsg.Produce}, Topic: "t", Partitions: []int32{2},
		Err: kerr.NotEnoughReplicas, Count: cfg.RecordRetries + 1,
	})
	p := newPublisher(t, cfg)

	var msgs []*sink.Message
	for i := range 30 {
		key := keyOn2
		if i%3 == 0 {
			key = keyOn0
		}
		msgs = append(msgs, msg(string(rune('a'+i)), key, payload(250, "m")))
	}
	errs := p.Publish(testCtx(t), msgs)
	for i, err := range errs {
		onFaulted := string(msgs[i].PartitionKey) == keyOn2
		switch {
		case onFaulted && (err == nil || sink.IsTerminal(err)):
			t.Errorf("message %d on the faulted partition: want retryable, got %v", i, err)
		case !onFaulted && err != nil:
			t.Errorf("message %d on a healthy partition: %v", i, err)
		}
	}
	if ends := endOffsets(t, c, "t"); ends[2] != 0 {
		t.Fatalf("%d records delivered to partition 2 after its first batch failed", ends[2])
	}

	// The fault is spent: the same messages now go through, so the
	// partition was not simply unavailable.
	var again []*sink.Message
	for _, m := range msgs {
		if string(m.PartitionKey) == keyOn2 {
			again = append(again, m)
		}
	}
	for i, err := range p.Publish(testCtx(t), again) {
		if err != nil {
			t.Fatalf("retry of message %d: %v", i, err)
		}
	}
	if ends := endOffsets(t, c, "t"); ends[2] != int64(len(again)) {
		t.Fatalf("partition 2 holds %d records, want %d", ends[2], len(again))
	}
}

// TestPublishIsolatesBadRecord has the broker reject, as INVALID_RECORD,
// every batch of partition 2 that holds the poison record. franz-go hands
// that error to every record buffered for the partition; only the poison
// record may end up terminal, and the others are delivered in order.
func TestPublishIsolatesBadRecord(t *testing.T) {
	t.Parallel()
	c := newCluster(t)
	poison := []byte("POISON")
	c.Fault(kfake.Fault{
		Keys: []kmsg.Key{kmsg.Produce}, Topic: "t", Partitions: []int32{2},
		Err: kerr.InvalidRecord, Count: -1,
		When: func(req kmsg.Request) bool {
			pr, ok := req.(*kmsg.ProduceRequest)
			if !ok {
				return false
			}
			for _, tp := range pr.Topics {
				for _, pp := range tp.Partitions {
					if pp.Partition == 2 && bytes.Contains(pp.Records, poison) {
						return true
					}
				}
			}
			return false
		},
	})
	p := newPublisher(t, testConfig(c))

	var msgs []*sink.Message
	for i := range 10 {
		m := msg(string(rune('a'+i)), keyOn2, []byte{byte('a' + i)})
		if i == 4 {
			m.Payload = poison
		}
		msgs = append(msgs, m)
	}
	msgs = append(msgs, msg("other", keyOn0, []byte("other")))
	errs := p.Publish(testCtx(t), msgs)
	for i, err := range errs {
		switch {
		case i == 4 && (!sink.IsTerminal(err) || !errors.Is(err, kerr.InvalidRecord)):
			t.Errorf("poison: want terminal INVALID_RECORD, got %v", err)
		case i != 4 && err != nil:
			t.Errorf("message %d: %v", i, err)
		}
	}
	var got []byte
	for _, r := range consume(t, c, "t", len(msgs)-1) {
		if r.Partition == 2 {
			got = append(got, r.Value...)
		}
	}
	if string(got) != "abcdfghij" {
		t.Fatalf("partition 2 holds %q, want %q", got, "abcdfghij")
	}
}

// TestPublishContextEnds drops every produce request unanswered: Publish
// must come back when its context ends, with retryable errors.
func TestPublishContextEnds(t *testing.T) {
	t.Parallel()
	c := newCluster(t)
	c.ControlKey(int16(kmsg.Produce), func(kmsg.Request) (kmsg.Response, error, bool) {
		c.KeepControl()
		return nil, nil, true // no answer
	})
	p := newPublisher(t, testConfig(c))

	ctx, cancel := context.WithTimeout(t.Context(), 300*time.Millisecond)
	defer cancel()
	start := time.Now()
	errs := p.Publish(ctx, []*sink.Message{msg("a", keyOn0, []byte("a")), msg("b", keyOn2, []byte("b"))})
	if d := time.Since(start); d > 5*time.Second {
		t.Fatalf("Publish took %v after its context ended", d)
	}
	for i, err := range errs {
		if err == nil || sink.IsTerminal(err) || !errors.Is(err, context.DeadlineExceeded) {
			t.Errorf("message %d: want retryable deadline error, got %v", i, err)
		}
	}

	// An ended context sends nothing.
	errs = p.Publish(ctx, []*sink.Message{msg("c", keyOn0, []byte("c"))})
	if errs[0] == nil || sink.IsTerminal(errs[0]) {
		t.Fatalf("want retryable error, got %v", errs[0])
	}
	closeCtx, cancelClose := context.WithTimeout(t.Context(), 100*time.Millisecond)
	defer cancelClose()
	_ = p.Close(closeCtx)
}

// TestPublishTopicLimitBelowBatch gives a topic a max.message.bytes below
// the batch size the client builds: the broker rejects the whole batch as
// MESSAGE_TOO_LARGE. Records that fit alone must be delivered; only the one
// that does not is terminal.
func TestPublishTopicLimitBelowBatch(t *testing.T) {
	t.Parallel()
	c := newCluster(t)
	if err := c.CreateTopic("small", 1, map[string]string{"max.message.bytes": "700"}); err != nil {
		t.Fatal(err)
	}
	p := newPublisher(t, testConfig(c))

	var msgs []*sink.Message
	for i, size := range []int{250, 250, 900, 250} {
		m := msg(string(rune('a'+i)), "", payload(size, string(rune('a'+i))))
		m.Destination = "small"
		msgs = append(msgs, m)
	}
	errs := p.Publish(testCtx(t), msgs)
	for i, err := range errs {
		switch {
		case i == 2 && (!sink.IsTerminal(err) || !errors.Is(err, kerr.MessageTooLarge)):
			t.Errorf("record above the topic limit: want terminal MESSAGE_TOO_LARGE, got %v", err)
		case i != 2 && err != nil:
			t.Errorf("message %d: %v", i, err)
		}
	}
	var got []byte
	for _, r := range consume(t, c, "small", 3) {
		got = append(got, r.Value[0])
	}
	if string(got) != "abd" {
		t.Fatalf("topic holds %q, want %q", got, "abd")
	}
}
