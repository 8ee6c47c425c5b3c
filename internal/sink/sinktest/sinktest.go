// Package sinktest is the conformance suite every sink passes. A sink's test
// describes how to reach its server and read back what arrived (a Harness);
// Run then checks the contract of sink.Publisher against the real server:
// one result per message, headers and ids carried, per-key order, terminal
// versus retryable classification, a connection cut mid-stream that loses
// nothing and reports nothing as published that the server did not confirm,
// and a server that cannot be reached reported as the sink's failure, not
// the messages'.
package sinktest

import (
	"bytes"
	"context"
	"fmt"
	"net"
	"sync"
	"testing"
	"time"

	"github.com/outbox-relay/outbox-relay/internal/sink"
)

// Received is one message read back from the server.
type Received struct {
	// ID is the event id as the sink carries it (a header, Nats-Msg-Id,
	// message_id, Idempotency-Key...).
	ID      string
	Key     []byte
	Headers []sink.Header
	Payload []byte
}

// Reader returns what arrived at one destination so far, in arrival order.
// The suite calls it repeatedly until what it expects is there.
type Reader func(ctx context.Context) ([]Received, error)

// Harness adapts one sink to the suite.
type Harness struct {
	// New returns a publisher whose connections go to addr (the server's
	// address, or a Proxy in front of it). The suite closes it.
	New func(t *testing.T, addr string) sink.Publisher
	// Addr is the server's address (host:port) as New expects it.
	Addr string
	// Destination creates a fresh destination (topic, subject, stream,
	// queue, URL path...) for one test and returns its name as a route
	// renders it, and a Reader of what arrives there.
	Destination func(t *testing.T) (string, Reader)
	// Unroutable returns a destination that the server refuses for good
	// (publishing there must fail terminally), or "" when the sink has no
	// such notion.
	Unroutable func(t *testing.T) string
	// Keys is true when the sink carries the message key (Kafka, Redis
	// fields...); the suite then checks it arrives.
	Keys bool
	// NoProxy is true when the sink cannot be reached through a TCP proxy
	// (its client learns other addresses from the server, as Kafka's does);
	// Cut is then used instead.
	NoProxy bool
	// Cut, when NoProxy is set, breaks the sink's connections for about d
	// (the publisher must fail or wait, then recover).
	Cut func(t *testing.T, d time.Duration)
}

// Run runs the conformance suite.
func Run(t *testing.T, h Harness) {
	t.Run("BatchResultsAndContent", func(t *testing.T) { testBatch(t, h) })
	t.Run("PerKeyOrder", func(t *testing.T) { testOrder(t, h) })
	t.Run("Concurrent", func(t *testing.T) { testConcurrent(t, h) })
	t.Run("Terminal", func(t *testing.T) { testTerminal(t, h) })
	t.Run("CancelledIsRetryable", func(t *testing.T) { testCancelled(t, h) })
	t.Run("ConnectionCut", func(t *testing.T) { testCut(t, h) })
	t.Run("Unreachable", func(t *testing.T) { testUnreachable(t, h) })
}

func ctxFor(t *testing.T, d time.Duration) context.Context {
	ctx, cancel := context.WithTimeout(t.Context(), d)
	t.Cleanup(cancel)
	return ctx
}

// Message builds message i of key k for dest, with headers and the id
// carried the way the relay sends them.
func Message(dest string, k, i int) *sink.Message {
	id := fmt.Sprintf("%d", k*1_000_000+i)
	return &sink.Message{
		ID:          id,
		Destination: dest,
		Key:         fmt.Appendf(nil, "key-%d", k),
		Headers: []sink.Header{
			{Key: "event_id", Value: []byte(id)},
			{Key: "event_type", Value: []byte("order.created")},
			{Key: "x-seq", Value: fmt.Appendf(nil, "%d", i)},
		},
		Payload: fmt.Appendf(nil, `{"key":%d,"seq":%d}`, k, i),
	}
}

// messages builds n messages per key for keys keys, interleaved, with
// sequence numbers from start.
func messages(dest string, keys, n int) []*sink.Message { return messagesFrom(dest, keys, n, 0) }

func messagesFrom(dest string, keys, n, start int) []*sink.Message {
	var out []*sink.Message
	for i := range n {
		for k := range keys {
			out = append(out, Message(dest, k, start+i))
		}
	}
	return out
}

// seqOf parses the key and sequence number out of a payload Message built.
func seqOf(t *testing.T, payload []byte) (key, seq int) {
	t.Helper()
	if _, err := fmt.Sscanf(string(payload), `{"key":%d,"seq":%d}`, &key, &seq); err != nil {
		t.Fatalf("payload %q: %v", payload, err)
	}
	return key, seq
}

// waitFor reads dest until want messages (by distinct id) arrived.
func waitFor(t *testing.T, read Reader, want int) []Received {
	t.Helper()
	ctx := ctxFor(t, 30*time.Second)
	var got []Received
	for {
		var err error
		got, err = read(ctx)
		if err == nil && distinct(got) >= want {
			return got
		}
		select {
		case <-ctx.Done():
			t.Fatalf("read back %d distinct messages, want %d (last error: %v)", distinct(got), want, err)
		case <-time.After(20 * time.Millisecond):
		}
	}
}

func distinct(rs []Received) int {
	seen := map[string]bool{}
	for _, r := range rs {
		seen[r.ID] = true
	}
	return len(seen)
}

func newPublisher(t *testing.T, h Harness, addr string) sink.Publisher {
	t.Helper()
	p := h.New(t, addr)
	t.Cleanup(func() {
		ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
		defer cancel()
		_ = p.Close(ctx)
	})
	return p
}

func header(hs []sink.Header, key string) ([]byte, bool) {
	for _, h := range hs {
		if h.Key == key {
			return h.Value, true
		}
	}
	return nil, false
}

func testBatch(t *testing.T, h Harness) {
	p := newPublisher(t, h, h.Addr)
	dest, read := h.Destination(t)
	msgs := messages(dest, 5, 20)
	errs := p.Publish(ctxFor(t, 30*time.Second), msgs)
	if len(errs) != len(msgs) {
		t.Fatalf("Publish returned %d results for %d messages", len(errs), len(msgs))
	}
	for i, err := range errs {
		if err != nil {
			t.Fatalf("message %d: %v", i, err)
		}
	}
	got := waitFor(t, read, len(msgs))
	byID := map[string]*sink.Message{}
	for _, m := range msgs {
		byID[m.ID] = m
	}
	for _, r := range got {
		m, ok := byID[r.ID]
		if !ok {
			t.Fatalf("received id %q that was not sent", r.ID)
		}
		if !bytes.Equal(r.Payload, m.Payload) {
			t.Errorf("id %s: payload %q, want %q", r.ID, r.Payload, m.Payload)
		}
		if h.Keys && !bytes.Equal(r.Key, m.Key) {
			t.Errorf("id %s: key %q, want %q", r.ID, r.Key, m.Key)
		}
		for _, mh := range m.Headers {
			v, ok := header(r.Headers, mh.Key)
			if !ok || !bytes.Equal(v, mh.Value) {
				t.Errorf("id %s: header %s = %q (present %v), want %q", r.ID, mh.Key, v, ok, mh.Value)
			}
		}
	}
	if len(got) != len(msgs) {
		t.Errorf("received %d messages for %d sent without a failure (duplicates)", len(got), len(msgs))
	}
	if p.MaxMessageBytes() < 0 {
		t.Errorf("MaxMessageBytes() = %d", p.MaxMessageBytes())
	}
}

// checkOrder fails unless, for every key, messages first arrived in
// sequence order. A redelivered copy of a message that already arrived is a
// duplicate, not a reordering, and is skipped.
func checkOrder(t *testing.T, got []Received) {
	t.Helper()
	last := map[int]int{}
	seen := map[string]bool{}
	for _, r := range got {
		if seen[r.ID] {
			continue
		}
		seen[r.ID] = true
		k, i := seqOf(t, r.Payload)
		if prev, ok := last[k]; ok && i < prev {
			t.Fatalf("key %d: seq %d first arrived after seq %d", k, i, prev)
		}
		last[k] = i
	}
}

func testOrder(t *testing.T, h Harness) {
	p := newPublisher(t, h, h.Addr)
	dest, read := h.Destination(t)
	var all []*sink.Message
	for b := range 5 {
		msgs := messagesFrom(dest, 10, 20, b*100)
		for i, err := range p.Publish(ctxFor(t, 30*time.Second), msgs) {
			if err != nil {
				t.Fatalf("batch %d message %d: %v", b, i, err)
			}
		}
		all = append(all, msgs...)
	}
	checkOrder(t, waitFor(t, read, len(all)))
}

func testConcurrent(t *testing.T, h Harness) {
	p := newPublisher(t, h, h.Addr)
	dest, read := h.Destination(t)
	var wg sync.WaitGroup
	errc := make(chan error, 4)
	for g := range 4 {
		wg.Go(func() {
			var msgs []*sink.Message
			for i := range 25 {
				msgs = append(msgs, Message(dest, g, i))
			}
			for i, err := range p.Publish(ctxFor(t, 30*time.Second), msgs) {
				if err != nil {
					errc <- fmt.Errorf("goroutine %d message %d: %w", g, i, err)
					return
				}
			}
		})
	}
	wg.Wait()
	close(errc)
	for err := range errc {
		t.Fatal(err)
	}
	got := waitFor(t, read, 100)
	checkOrder(t, got)
}

func testTerminal(t *testing.T, h Harness) {
	if h.Unroutable == nil {
		t.Skip("the sink has no destination the server refuses")
	}
	bad := h.Unroutable(t)
	if bad == "" {
		t.Skip("the sink has no destination the server refuses")
	}
	p := newPublisher(t, h, h.Addr)
	dest, read := h.Destination(t)
	msgs := []*sink.Message{Message(dest, 1, 0), Message(bad, 2, 0), Message(dest, 3, 0)}
	errs := p.Publish(ctxFor(t, 30*time.Second), msgs)
	if errs[1] == nil || !sink.IsTerminal(errs[1]) {
		t.Fatalf("unroutable destination %q: got %v, want a terminal error", bad, errs[1])
	}
	if errs[0] != nil || errs[2] != nil {
		t.Fatalf("good messages beside a refused one failed: %v, %v", errs[0], errs[2])
	}
	waitFor(t, read, 2)
}

func testCancelled(t *testing.T, h Harness) {
	p := newPublisher(t, h, h.Addr)
	dest, _ := h.Destination(t)
	ctx, cancel := context.WithCancel(t.Context())
	cancel()
	msgs := messages(dest, 2, 3)
	errs := p.Publish(ctx, msgs)
	if len(errs) != len(msgs) {
		t.Fatalf("Publish returned %d results for %d messages", len(errs), len(msgs))
	}
	for i, err := range errs {
		// A message may have been confirmed before the cancellation was
		// seen; one that failed must be retryable.
		if err != nil && sink.IsTerminal(err) {
			t.Fatalf("message %d: cancelled publish reported terminal: %v", i, err)
		}
	}
	// The publisher still works after a cancelled call.
	for i, err := range p.Publish(ctxFor(t, 30*time.Second), messages(dest, 1, 1)) {
		if err != nil {
			t.Fatalf("after a cancelled call, message %d: %v", i, err)
		}
	}
}

// testCut publishes batches while the connection is cut and restored,
// retrying failed messages as the engine does (a failed message and the
// rest of its key go again in the next call). Every message confirmed must
// be on the server, every message must eventually be confirmed, and per-key
// order must hold.
func testCut(t *testing.T, h Harness) {
	addr := h.Addr
	var cut func(time.Duration)
	if h.NoProxy {
		if h.Cut == nil {
			t.Fatal("Harness.NoProxy needs Cut")
		}
		cut = func(d time.Duration) { h.Cut(t, d) }
	} else {
		px := NewProxy(t, h.Addr)
		addr = px.Addr()
		cut = px.Cut
	}
	p := newPublisher(t, h, addr)
	dest, read := h.Destination(t)

	const keys, perKey = 5, 40
	next := make([]int, keys) // next seq to publish per key
	confirmed := map[string]bool{}
	failures := 0
	deadline := time.Now().Add(60 * time.Second)
	for round := 0; ; round++ {
		var batch []*sink.Message
		for k := range keys {
			for i := next[k]; i < perKey && i < next[k]+4; i++ {
				batch = append(batch, Message(dest, k, i))
			}
		}
		if len(batch) == 0 {
			break
		}
		if time.Now().After(deadline) {
			t.Fatalf("not every message confirmed after 60s (%d failures)", failures)
		}
		if round == 3 {
			cut(500 * time.Millisecond)
		}
		ctx, cancel := context.WithTimeout(t.Context(), 5*time.Second)
		errs := p.Publish(ctx, batch)
		cancel()
		failed := map[int]bool{}
		for i, err := range errs {
			m := batch[i]
			k, seq := seqOf(t, m.Payload)
			if err != nil {
				if sink.IsTerminal(err) {
					t.Fatalf("message %s failed terminally during a cut: %v", m.ID, err)
				}
				failures++
				failed[k] = true
				continue
			}
			if failed[k] {
				t.Fatalf("key %d: seq %d confirmed after an earlier message of its key failed in the same call", k, seq)
			}
			confirmed[m.ID] = true
			next[k] = seq + 1
		}
		if len(failed) > 0 {
			time.Sleep(50 * time.Millisecond)
		}
	}
	if failures == 0 {
		t.Log("no publish failed during the cut (the client rode it out)")
	}
	got := waitFor(t, read, keys*perKey)
	present := map[string]bool{}
	for _, r := range got {
		present[r.ID] = true
	}
	for id := range confirmed {
		if !present[id] {
			t.Errorf("message %s was confirmed but is not on the server", id)
		}
	}
	checkOrder(t, got)
}

// testUnreachable publishes to an address where nothing listens: every
// message fails, and says the sink is down (sink.IsDown), so the engine
// charges no attempt, however long the outage.
func testUnreachable(t *testing.T, h Harness) {
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	addr := ln.Addr().String()
	_ = ln.Close()
	p := newPublisher(t, h, addr)
	dest, _ := h.Destination(t)
	msgs := messages(dest, 2, 2)
	first := map[string]bool{}
	for i, err := range p.Publish(ctxFor(t, 60*time.Second), msgs) {
		if err == nil || sink.IsTerminal(err) {
			t.Fatalf("message %d to a server that is not there: %v; want a retryable failure", i, err)
		}
		// A key's later messages may fail unsent behind its first: the
		// engine holds them whatever their error says.
		if k := string(msgs[i].Key); !first[k] {
			first[k] = true
			if !sink.IsDown(err) {
				t.Errorf("message %d to a server that is not there: %v; want a failure of the sink (down)", i, err)
			}
		}
	}
}
