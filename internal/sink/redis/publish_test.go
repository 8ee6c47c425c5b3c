package redis

import (
	"context"
	"errors"
	"fmt"
	"reflect"
	"testing"
	"time"

	goredis "github.com/redis/go-redis/v9"

	"github.com/outbox-relay/outbox-relay/internal/sink"
)

func msg(stream, key string, i int) *sink.Message {
	id := fmt.Sprintf("%s-%d-%s", key, i, suffix())
	m := &sink.Message{
		ID:          id,
		Destination: stream,
		Headers:     []sink.Header{{Key: "event_id", Value: []byte(id)}},
		Payload:     fmt.Appendf(nil, `{"key":%q,"seq":%d}`, key, i),
	}
	if key != "" {
		m.Key = []byte(key)
	}
	return m
}

// The entry's fields come in a fixed order with the documented names.
func TestEntryLayout(t *testing.T) {
	c := admin(t)
	stream := newKey(t, c, "stream")
	p := newPublisher(t, testConfig(serverAddr()))
	m := &sink.Message{
		ID: "42", Destination: stream, Key: []byte("order-1"), PartitionKey: []byte("tenant-7"),
		Headers: []sink.Header{{Key: "event_type", Value: []byte("order.created")}, {Key: "payload", Value: []byte("h")}},
		Payload: []byte(`{"a":1}`),
	}
	noKey := &sink.Message{ID: "43", Destination: stream, Payload: []byte("raw")}
	for i, err := range p.Publish(testCtx(t), []*sink.Message{m, noKey}) {
		if err != nil {
			t.Fatalf("message %d: %v", i, err)
		}
	}
	// XRANGE through RESP2 keeps the fields as a flat ordered list.
	raw, err := c.Do(testCtx(t), "XRANGE", stream, "-", "+").Slice()
	if err != nil {
		t.Fatal(err)
	}
	if len(raw) != 2 {
		t.Fatalf("%d entries, want 2", len(raw))
	}
	want := [][]any{
		{"id", "42", "key", "order-1", "partition_key", "tenant-7", "h:event_type", "order.created", "h:payload", "h", "payload", `{"a":1}`},
		{"id", "43", "payload", "raw"},
	}
	for i, e := range raw {
		got := flatten(e.([]any)[1])
		if !reflect.DeepEqual(got, want[i]) {
			t.Errorf("entry %d fields %q, want %q", i, got, want[i])
		}
	}
}

// flatten turns a RESP2 field list or a RESP3 map into field, value, ...
func flatten(v any) []any {
	switch v := v.(type) {
	case []any:
		return v
	case map[any]any:
		var out []any
		for k, x := range v {
			out = append(out, k, x)
		}
		return out
	}
	return nil
}

func TestMaxLenTrims(t *testing.T) {
	c := admin(t)
	stream := newKey(t, c, "stream")
	cfg := testConfig(serverAddr())
	cfg.MaxLen = 10
	p := newPublisher(t, cfg)
	for b := range 5 {
		var msgs []*sink.Message
		for i := range 200 {
			msgs = append(msgs, msg(stream, "", b*200+i))
		}
		for i, err := range p.Publish(testCtx(t), msgs) {
			if err != nil {
				t.Fatalf("message %d: %v", i, err)
			}
		}
	}
	n, err := c.XLen(testCtx(t), stream).Result()
	if err != nil {
		t.Fatal(err)
	}
	// MAXLEN ~ trims whole nodes (100 entries by default), never below 10.
	if n < 10 || n > 300 {
		t.Fatalf("stream length %d after 1000 entries with max_len 10", n)
	}
}

// WRONGTYPE fails only its message: the key's later message to a stream
// is stored, and the refused one goes to the dead-letter table.
func TestWrongTypeFailsOnlyItsMessage(t *testing.T) {
	c := admin(t)
	stream := newKey(t, c, "stream")
	str := newKey(t, c, "string")
	if err := c.Set(testCtx(t), str, "x", 0).Err(); err != nil {
		t.Fatal(err)
	}
	p := newPublisher(t, testConfig(serverAddr()))
	errs := p.Publish(testCtx(t), []*sink.Message{msg(stream, "k", 0), msg(str, "k", 1), msg(stream, "k", 2)})
	if errs[0] != nil || errs[2] != nil {
		t.Fatalf("messages beside the refused one: %v, %v", errs[0], errs[2])
	}
	if !sink.IsTerminal(errs[1]) || errorCode(errs[1]) != "WRONGTYPE" {
		t.Fatalf("XADD to a string: got %v, want terminal WRONGTYPE", errs[1])
	}
}

// A message refused before sending is terminal; the rest of its key goes on.
func TestRefusedBeforeSending(t *testing.T) {
	c := admin(t)
	stream := newKey(t, c, "stream")
	cfg := testConfig(serverAddr())
	cfg.MaxMessageBytes = 100
	p := newPublisher(t, cfg)
	big := msg(stream, "k", 1)
	big.Payload = make([]byte, 101)
	errs := p.Publish(testCtx(t), []*sink.Message{msg(stream, "k", 0), big, msg(stream, "k", 2), msg("", "k", 3)})
	if errs[0] != nil || errs[2] != nil {
		t.Fatalf("unaffected messages failed: %v, %v", errs[0], errs[2])
	}
	if !sink.IsTerminal(errs[1]) || !sink.IsTerminal(errs[3]) {
		t.Fatalf("too large / no destination: got %v, %v, want terminal", errs[1], errs[3])
	}
	if n := c.XLen(testCtx(t), stream).Val(); n != 2 {
		t.Fatalf("stream holds %d entries, want 2", n)
	}
	if p.MaxMessageBytes() != 100 {
		t.Fatalf("MaxMessageBytes() = %d", p.MaxMessageBytes())
	}
}

func TestOvertaken(t *testing.T) {
	oom := errors.New("OOM command not allowed when used memory > 'maxmemory'")
	ctx := context.Background()
	cmd := func(err error) *goredis.StringCmd {
		c := goredis.NewStringCmd(ctx, "xadd")
		c.SetErr(err)
		return c
	}
	msgs := []*sink.Message{
		msg("s", "a", 0), msg("s", "a", 1), // fails, then its successor stored
		msg("s", "b", 0), msg("s", "b", 1), // stored, then fails
		msg("s", "c", 0), msg("s", "c", 1), // both fail
		msg("s", "", 0), msg("s", "", 1), // no key: no order
	}
	cmds := []*goredis.StringCmd{cmd(oom), cmd(nil), cmd(nil), cmd(oom), cmd(oom), cmd(oom), cmd(oom), cmd(nil)}
	errs := make([]error, len(cmds))
	for i, c := range cmds {
		errs[i] = result("s", c.Err())
	}
	overtaken(msgs, cmds, errs)
	if !sink.IsTerminal(errs[0]) || !errors.Is(errs[0], errOvertaken) || !errors.Is(errs[0], oom) {
		t.Errorf("overtaken failure: got %v, want terminal", errs[0])
	}
	for _, i := range []int{3, 4, 5, 6} {
		if errs[i] == nil || sink.IsTerminal(errs[i]) {
			t.Errorf("message %d: got %v, want retryable", i, errs[i])
		}
	}
	for _, i := range []int{1, 2, 7} {
		if errs[i] != nil {
			t.Errorf("message %d: %v", i, errs[i])
		}
	}
}

func TestServerDown(t *testing.T) {
	p := newPublisher(t, testConfig("127.0.0.1:1"))
	if err := p.Ping(testCtx(t)); err == nil {
		t.Fatal("Ping succeeded with no server")
	}
	errs := p.Publish(testCtx(t), []*sink.Message{msg("s", "k", 0), msg("s", "k", 1)})
	for i, err := range errs {
		if err == nil || sink.IsTerminal(err) {
			t.Fatalf("message %d with no server: got %v, want retryable", i, err)
		}
	}
}

func TestClosedPublisherFailsRetryably(t *testing.T) {
	c := admin(t)
	stream := newKey(t, c, "stream")
	p := newPublisher(t, testConfig(serverAddr()))
	if err := p.Close(testCtx(t)); err != nil {
		t.Fatal(err)
	}
	err := p.Publish(testCtx(t), []*sink.Message{msg(stream, "k", 0)})[0]
	if err == nil || sink.IsTerminal(err) {
		t.Fatalf("publish after Close: got %v, want a retryable error", err)
	}
}

// A call whose context ends while the pipeline runs reports nothing as
// stored, and the publisher keeps working.
func TestCancelledDuringPipeline(t *testing.T) {
	c := admin(t)
	stream := newKey(t, c, "stream")
	p := newPublisher(t, testConfig(serverAddr()))
	var msgs []*sink.Message
	for i := range 2000 {
		m := msg(stream, "k", i)
		m.Payload = make([]byte, 4096)
		msgs = append(msgs, m)
	}
	ctx, cancel := context.WithTimeout(t.Context(), time.Millisecond)
	defer cancel()
	failed := false
	for i, err := range p.Publish(ctx, msgs) {
		if err != nil {
			failed = true
			if sink.IsTerminal(err) {
				t.Fatalf("message %d: %v", i, err)
			}
		} else if failed {
			t.Fatalf("message %d confirmed after an earlier one failed", i)
		}
	}
	if !failed {
		t.Log("the whole pipeline ran within 1ms")
	}
	if err := p.Publish(testCtx(t), msgs[:1])[0]; err != nil {
		t.Fatalf("after a cancelled call: %v", err)
	}
}
