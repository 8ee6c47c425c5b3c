package nats

import (
	"context"
	"errors"
	"fmt"
	"strings"
	"testing"
	"time"

	"github.com/nats-io/nats.go/jetstream"

	"github.com/outbox-relay/outbox-relay/internal/sink"
	"github.com/outbox-relay/outbox-relay/internal/sink/keyorder"
)

func msg(subject, key string, i int) *sink.Message {
	id := fmt.Sprintf("%s-%d-%s", key, i, suffix())
	m := &sink.Message{
		ID:          id,
		Destination: subject,
		Headers:     []sink.Header{{Key: "event_id", Value: []byte(id)}},
		Payload:     fmt.Appendf(nil, `{"key":%q,"seq":%d}`, key, i),
	}
	if key != "" {
		m.Key = []byte(key)
	}
	return m
}

func TestHeadersAndKeysArrive(t *testing.T) {
	s := newStream(t)
	p := newPublisher(t, testConfig(serverAddr()))
	m := msg(s.subject("a"), "k1", 0)
	m.PartitionKey = []byte("tenant-7")
	m.Headers = append(m.Headers, sink.Header{Key: "event_type", Value: []byte("order.created")},
		sink.Header{Key: "x-multi", Value: []byte("one")}, sink.Header{Key: "x-multi", Value: []byte("two")})
	if err := p.Publish(testCtx(t), []*sink.Message{m})[0]; err != nil {
		t.Fatal(err)
	}
	got := s.all(t)
	if len(got) != 1 {
		t.Fatalf("stored %d messages, want 1", len(got))
	}
	h := got[0].Header
	for name, want := range map[string]string{
		HeaderMsgID: m.ID, HeaderKey: "k1", HeaderPartitionKey: "tenant-7",
		"event_id": m.ID, "event_type": "order.created",
	} {
		if v := h.Get(name); v != want {
			t.Errorf("header %s = %q, want %q", name, v, want)
		}
	}
	if vs := h.Values("x-multi"); len(vs) != 2 || vs[0] != "one" || vs[1] != "two" {
		t.Errorf("repeated header x-multi = %q, want [one two]", vs)
	}
	if got[0].Subject != m.Destination || string(got[0].Data) != string(m.Payload) {
		t.Errorf("stored %q on %s, want %q on %s", got[0].Data, got[0].Subject, m.Payload, m.Destination)
	}
}

// A retried message within the duplicate window is stored once.
func TestRetryIsDeduplicated(t *testing.T) {
	s := newStream(t)
	p := newPublisher(t, testConfig(serverAddr()))
	m := msg(s.subject("a"), "k", 0)
	for range 3 {
		if err := p.Publish(testCtx(t), []*sink.Message{m})[0]; err != nil {
			t.Fatal(err)
		}
	}
	if got := s.all(t); len(got) != 1 {
		t.Fatalf("stored %d copies, want 1", len(got))
	}
}

// A stream full with discard-new refuses a message (retryable); the rest
// of its key is held back unsent, and other keys carry on independently.
func TestFailureHoldsRestOfKey(t *testing.T) {
	s := newStream(t, func(c *jetstream.StreamConfig) {
		c.MaxMsgs = 3
		c.Discard = jetstream.DiscardNew
	})
	p := newPublisher(t, testConfig(serverAddr()))
	var msgs []*sink.Message
	for i := range 5 {
		msgs = append(msgs, msg(s.subject("a"), "k", i))
	}
	errs := p.Publish(testCtx(t), msgs)
	for i := range 3 {
		if errs[i] != nil {
			t.Fatalf("message %d: %v", i, errs[i])
		}
	}
	if errs[3] == nil || sink.IsTerminal(errs[3]) || errors.Is(errs[3], keyorder.ErrHeldBack) {
		t.Fatalf("message 3 on a full stream: got %v, want a retryable refusal", errs[3])
	}
	if !errors.Is(errs[4], keyorder.ErrHeldBack) || sink.IsTerminal(errs[4]) {
		t.Fatalf("message 4 after its key failed: got %v, want held (retryable)", errs[4])
	}
	if got := s.all(t); len(got) != 3 {
		t.Fatalf("stream holds %d messages, want 3", len(got))
	}
}

// With max_pending_per_key above 1 a key's messages travel together; a
// stream full by its bytes (discard new) refuses the second (too big for
// the room left) and takes the third: the second, overtaken, fails
// terminally (to the dead letters) rather than being sent again after it.
func TestManyPendingOfOneKey(t *testing.T) {
	s := newStream(t, func(c *jetstream.StreamConfig) {
		c.MaxBytes = 600
		c.Discard = jetstream.DiscardNew
	})
	cfg := testConfig(serverAddr())
	cfg.MaxPendingPerKey = 3
	p := newPublisher(t, cfg)
	msgs := []*sink.Message{msg(s.subject("a"), "k", 0), msg(s.subject("a"), "k", 1), msg(s.subject("a"), "k", 2)}
	msgs[1].Payload = []byte(`"` + strings.Repeat("x", 1000) + `"`)
	errs := p.Publish(testCtx(t), msgs)
	if errs[0] != nil || errs[2] != nil {
		t.Fatalf("first and third: %v, %v; want both stored", errs[0], errs[2])
	}
	if !sink.IsTerminal(errs[1]) || !errors.Is(errs[1], keyorder.ErrOvertaken) {
		t.Fatalf("second: want a terminal refusal overtaken by the third, got %v", errs[1])
	}
	if got := s.all(t); len(got) != 2 {
		t.Fatalf("stream holds %d messages, want 2", len(got))
	}
}

// Without a stream for the subject the message fails terminally; it goes
// to the dead-letter table, so the rest of its key goes on.
func TestNoStreamIsTerminal(t *testing.T) {
	s := newStream(t)
	bad := "outbox-test-nostream-" + suffix() + ".x"
	p := newPublisher(t, testConfig(serverAddr()))
	msgs := []*sink.Message{msg(bad, "k", 0), msg(bad, "k", 1), msg(s.subject("a"), "k", 2), msg(s.subject("a"), "other", 0)}
	errs := p.Publish(testCtx(t), msgs)
	for i := range 2 {
		if !sink.IsTerminal(errs[i]) || classify(errs[i]) != badSubject {
			t.Errorf("message %d to a subject without stream: got %v, want terminal", i, errs[i])
		}
	}
	if errs[2] != nil || errs[3] != nil {
		t.Errorf("messages to a stream: %v, %v", errs[2], errs[3])
	}
	if got := s.all(t); len(got) != 2 {
		t.Fatalf("stream holds %d messages, want 2", len(got))
	}
}

func TestTooLargeIsTerminal(t *testing.T) {
	t.Run("max_payload", func(t *testing.T) {
		s := newStream(t)
		p := newPublisher(t, testConfig(serverAddr()))
		waitConnected(t, p)
		m := msg(s.subject("a"), "k", 0)
		m.Payload = make([]byte, p.MaxMessageBytes()+1)
		if err := p.Publish(testCtx(t), []*sink.Message{m})[0]; !sink.IsTerminal(err) {
			t.Fatalf("payload above max_payload: got %v, want terminal", err)
		}
		// Headers count too: the client refuses the whole message.
		m.Payload = make([]byte, p.MaxMessageBytes()-10)
		if err := p.Publish(testCtx(t), []*sink.Message{m})[0]; !sink.IsTerminal(err) {
			t.Fatalf("payload plus headers above max_payload: got %v, want terminal", err)
		}
	})
	t.Run("stream max_msg_size", func(t *testing.T) {
		s := newStream(t, func(c *jetstream.StreamConfig) { c.MaxMsgSize = 100 })
		p := newPublisher(t, testConfig(serverAddr()))
		m := msg(s.subject("a"), "k", 0)
		m.Payload = make([]byte, 200)
		err := p.Publish(testCtx(t), []*sink.Message{m})[0]
		if !sink.IsTerminal(err) || classify(err) != badMessage {
			t.Fatalf("payload above the stream's max_msg_size: got %v, want terminal", err)
		}
	})
}

func TestSealedStreamIsTerminal(t *testing.T) {
	s := newStream(t)
	ctx := testCtx(t)
	st, err := s.js.Stream(ctx, s.name)
	if err != nil {
		t.Fatal(err)
	}
	cfg := st.CachedInfo().Config
	cfg.Sealed = true
	if _, err := s.js.UpdateStream(ctx, cfg); err != nil {
		t.Fatalf("seal stream: %v", err)
	}
	p := newPublisher(t, testConfig(serverAddr()))
	err = p.Publish(ctx, []*sink.Message{msg(s.subject("a"), "k", 0)})[0]
	if !sink.IsTerminal(err) {
		t.Fatalf("publish to a sealed stream: got %v, want terminal", err)
	}
}

func TestBadHeadersAreTerminal(t *testing.T) {
	for _, h := range []sink.Header{
		{Key: "", Value: []byte("x")},
		{Key: "a:b", Value: []byte("x")},
		{Key: "a b", Value: []byte("x")},
		{Key: "x-line", Value: []byte("one\r\nInjected: yes")},
		{Key: "Nats-Rollup", Value: []byte("all")},
		{Key: "nats-msg-id", Value: []byte("other")},
		{Key: "outbox-key", Value: []byte("k")},
	} {
		m := msg("s.a", "k", 0)
		m.Headers = append(m.Headers, h)
		if _, err := natsMsg(m); !sink.IsTerminal(err) || !errors.Is(err, errBadHeader) {
			t.Errorf("header %q=%q: got %v, want terminal", h.Key, h.Value, err)
		}
	}
	m := msg("s.a", "k\n", 0)
	if _, err := natsMsg(m); !sink.IsTerminal(err) {
		t.Errorf("key with a line break: got %v, want terminal", err)
	}
	m = msg("", "k", 0)
	if _, err := natsMsg(m); !sink.IsTerminal(err) {
		t.Errorf("empty subject: got %v, want terminal", err)
	}
}

func TestCancelledWhileWaiting(t *testing.T) {
	s := newStream(t)
	p := newPublisher(t, testConfig(serverAddr()))
	ctx, cancel := context.WithTimeout(t.Context(), time.Millisecond)
	defer cancel()
	var msgs []*sink.Message
	for i := range 200 {
		msgs = append(msgs, msg(s.subject("a"), "k", i))
	}
	errs := p.Publish(ctx, msgs)
	failed := false
	for i, err := range errs {
		if err != nil {
			failed = true
			if sink.IsTerminal(err) {
				t.Fatalf("message %d: %v", i, err)
			}
			continue
		}
		if failed {
			t.Fatalf("message %d confirmed after an earlier one of its key failed", i)
		}
	}
	if !failed {
		t.Skip("every message was confirmed within 1ms")
	}
}

func TestClosedPublisherFailsRetryably(t *testing.T) {
	s := newStream(t)
	p := newPublisher(t, testConfig(serverAddr()))
	if err := p.Close(testCtx(t)); err != nil {
		t.Fatal(err)
	}
	err := p.Publish(testCtx(t), []*sink.Message{msg(s.subject("a"), "k", 0)})[0]
	if err == nil || sink.IsTerminal(err) {
		t.Fatalf("publish after Close: got %v, want a retryable error", err)
	}
}

func TestServerDown(t *testing.T) {
	// Nothing listens on port 1.
	p := newPublisher(t, testConfig("127.0.0.1:1"))
	if err := p.Ping(testCtx(t)); err == nil {
		t.Fatal("Ping succeeded with no server")
	}
	if got := p.MaxMessageBytes(); got != defaultMaxPayload {
		t.Errorf("MaxMessageBytes before connecting = %d, want %d", got, defaultMaxPayload)
	}
	err := p.Publish(testCtx(t), []*sink.Message{msg("s.a", "k", 0)})[0]
	if err == nil || sink.IsTerminal(err) || !strings.Contains(err.Error(), "s.a") {
		t.Fatalf("publish with no server: got %v, want a retryable error naming the subject", err)
	}
}
