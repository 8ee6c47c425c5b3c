package kafka

import (
	"bytes"
	"errors"
	"testing"
	"time"

	"github.com/twmb/franz-go/pkg/kerr"
	"github.com/twmb/franz-go/pkg/kfake"
	"github.com/twmb/franz-go/pkg/kgo"
	"github.com/twmb/franz-go/pkg/kmsg"

	"github.com/outbox-relay/outbox-relay/internal/sink"
)

func TestPublishRoundTrip(t *testing.T) {
	t.Parallel()
	c := newCluster(t)
	p := newPublisher(t, testConfig(c))

	wantKey, wantPK := javaPartition(javaMurmur2[keyOn0], testPartitions), javaPartition(javaMurmur2[keyOn2], testPartitions)
	if wantKey == wantPK {
		t.Fatal("test keys collide")
	}
	binary := []byte{0, 1, 2, 0xff, '\n', 0}
	msgs := []*sink.Message{
		{ID: "1", Destination: "t", Key: []byte(keyOn0), Payload: []byte(`{"a":1}`),
			Headers: []sink.Header{{Key: "event-id", Value: []byte("1")}, {Key: "type", Value: []byte("created")}}},
		{ID: "2", Destination: "t", Key: []byte(keyOn0), PartitionKey: []byte(keyOn2), Payload: binary,
			Headers: []sink.Header{{Key: "event-id", Value: []byte("2")}}},
		{ID: "3", Destination: "t", Payload: []byte("no key"),
			Headers: []sink.Header{{Key: "event-id", Value: []byte("3")}}},
	}
	for i, err := range p.Publish(testCtx(t), msgs) {
		if err != nil {
			t.Fatalf("message %d: %v", i, err)
		}
	}

	byID := make(map[string]*kgo.Record)
	for _, r := range consume(t, c, "t", len(msgs)) {
		byID[headerValue(r, "event-id")] = r
	}
	for _, tc := range []struct {
		id        string
		partition int // -1: any
	}{{"1", wantKey}, {"2", wantPK}, {"3", -1}} {
		m, r := msgs[tc.id[0]-'1'], byID[tc.id]
		if r == nil {
			t.Fatalf("message %s not consumed", tc.id)
		}
		if r.Topic != "t" || !bytes.Equal(r.Key, m.Key) || !bytes.Equal(r.Value, m.Payload) {
			t.Errorf("message %s: got topic %q key %q value %q", tc.id, r.Topic, r.Key, r.Value)
		}
		if tc.partition >= 0 && int(r.Partition) != tc.partition {
			t.Errorf("message %s: partition %d, want %d", tc.id, r.Partition, tc.partition)
		}
		if len(r.Headers) != len(m.Headers) {
			t.Fatalf("message %s: %d headers, want %d", tc.id, len(r.Headers), len(m.Headers))
		}
		for i, h := range m.Headers {
			if r.Headers[i].Key != h.Key || !bytes.Equal(r.Headers[i].Value, h.Value) {
				t.Errorf("message %s header %d: got %s=%q, want %s=%q", tc.id, i, r.Headers[i].Key, r.Headers[i].Value, h.Key, h.Value)
			}
		}
	}
	if r := byID["1"]; r.Key == nil || r.Headers[1].Key != "type" {
		t.Error("header order or key lost")
	}
}

func TestPublishTerminalWithoutKafka(t *testing.T) {
	t.Parallel()
	c := newCluster(t)
	produces := c.Fault(kfake.Fault{Keys: []kmsg.Key{kmsg.Produce}, Observe: true, Count: -1})
	cfg := testConfig(c)
	cfg.MaxMessageBytes = 1024
	p := newPublisher(t, cfg)
	if p.MaxMessageBytes() != 1024 {
		t.Fatalf("MaxMessageBytes %d", p.MaxMessageBytes())
	}

	msgs := []*sink.Message{
		msg("big", "", payload(1025, "big")),
		{ID: "nowhere", Payload: []byte("x")},
		nil,
	}
	errs := p.Publish(testCtx(t), msgs)
	for i, err := range errs {
		if !sink.IsTerminal(err) {
			t.Errorf("message %d: want terminal, got %v", i, err)
		}
	}
	if !errors.Is(errs[0], kerr.MessageTooLarge) {
		t.Errorf("oversized: %v does not wrap MESSAGE_TOO_LARGE", errs[0])
	}
	if n := produces.Hits(); n != 0 {
		t.Fatalf("%d produce requests for messages that should not reach Kafka", n)
	}
}

func TestPublishTerminalTooLargeRecord(t *testing.T) {
	t.Parallel()
	c := newCluster(t)
	cfg := testConfig(c)
	cfg.MaxMessageBytes = 1024
	p := newPublisher(t, cfg)

	// The payload fits, but with its key the record exceeds a batch.
	big := msg("big", "", payload(1000, "big"))
	big.Key = payload(200, "key")
	errs := p.Publish(testCtx(t), []*sink.Message{msg("ok", "", []byte("ok")), big})
	if errs[0] != nil {
		t.Fatalf("small message: %v", errs[0])
	}
	if !sink.IsTerminal(errs[1]) || !errors.Is(errs[1], kerr.MessageTooLarge) {
		t.Fatalf("oversized record: want terminal MESSAGE_TOO_LARGE, got %v", errs[1])
	}
}

func TestPublishUnknownTopic(t *testing.T) {
	t.Parallel()
	c := newCluster(t)
	p := newPublisher(t, testConfig(c))

	missing := msg("1", "", []byte("x"))
	missing.Destination = "missing"
	start := time.Now()
	errs := p.Publish(testCtx(t), []*sink.Message{missing, msg("2", "", []byte("y"))})
	if errs[0] == nil || sink.IsTerminal(errs[0]) || !errors.Is(errs[0], kerr.UnknownTopicOrPartition) {
		t.Fatalf("unknown topic: want a retryable UNKNOWN_TOPIC_OR_PARTITION, got %v", errs[0])
	}
	if errs[1] != nil {
		t.Fatalf("known topic: %v", errs[1])
	}
	t.Logf("unknown topic failed after %v", time.Since(start))
}

func TestPublishAutoCreateTopic(t *testing.T) {
	t.Parallel()
	c := newCluster(t, kfake.AllowAutoTopicCreation())
	cfg := testConfig(c)
	cfg.AutoCreateTopics = true
	p := newPublisher(t, cfg)

	m := msg("1", "", []byte("x"))
	m.Destination = "created"
	if err := p.Publish(testCtx(t), []*sink.Message{m})[0]; err != nil {
		t.Fatal(err)
	}
	if r := consume(t, c, "created", 1)[0]; string(r.Value) != "x" {
		t.Fatalf("got %q", r.Value)
	}
}

func TestPublishAfterClose(t *testing.T) {
	t.Parallel()
	c := newCluster(t)
	p := newPublisher(t, testConfig(c))
	if err := p.Ping(testCtx(t)); err != nil {
		t.Fatalf("ping: %v", err)
	}
	if err := p.Close(testCtx(t)); err != nil {
		t.Fatalf("close: %v", err)
	}
	err := p.Publish(testCtx(t), []*sink.Message{msg("a", "", []byte("a"))})[0]
	if err == nil || sink.IsTerminal(err) {
		t.Fatalf("publish after close: want retryable, got %v", err)
	}
	if err := p.Close(testCtx(t)); err != nil {
		t.Fatalf("second close: %v", err)
	}
}
