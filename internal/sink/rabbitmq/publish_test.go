package rabbitmq

import (
	"bytes"
	"errors"
	"strings"
	"testing"

	amqp "github.com/rabbitmq/amqp091-go"

	"github.com/outbox-relay/outbox-relay/internal/sink"
	"github.com/outbox-relay/outbox-relay/internal/sink/keyorder"
)

func TestMessageMapping(t *testing.T) {
	t.Parallel()
	a := newAdmin(t)
	ex := a.exchange(t, "mapping")
	read := a.consume(t, a.queue(t, ex, "rk", nil))
	p := newPublisher(t, testConfig(testAddr()))

	m := msg(ex+"/rk", "42", "order-7", `{"total":3}`)
	m.PartitionKey = []byte("tenant-1")
	m.Headers = append(m.Headers,
		sink.Header{Key: "event_type", Value: []byte("order.created")},
		sink.Header{Key: "binary", Value: []byte{0xff, 0x00}})
	plain := msg(ex+"/rk", "43", "", "not json")
	for i, err := range p.Publish(testCtx(t), []*sink.Message{m, plain}) {
		if err != nil {
			t.Fatalf("message %d: %v", i, err)
		}
	}
	got := waitDeliveries(t, read, 2)
	d := got[0]
	if d.MessageId == "43" {
		d, got[1] = got[1], got[0]
	}
	if d.MessageId != "42" || d.DeliveryMode != amqp.Persistent || d.ContentType != "application/json" ||
		d.Type != "order.created" || d.AppId != appID || d.Timestamp.IsZero() {
		t.Errorf("properties: id %q mode %d content type %q type %q app %q time %v",
			d.MessageId, d.DeliveryMode, d.ContentType, d.Type, d.AppId, d.Timestamp)
	}
	want := map[string]any{
		"event_id": "42", "event_type": "order.created", "binary": []byte{0xff, 0x00},
		HeaderKey: "order-7", HeaderPartitionKey: "tenant-1",
	}
	for k, v := range want {
		gv := d.Headers[k]
		if b, ok := v.([]byte); ok {
			if gb, ok := gv.([]byte); !ok || !bytes.Equal(gb, b) {
				t.Errorf("header %s = %#v, want %#v", k, gv, v)
			}
		} else if gv != v {
			t.Errorf("header %s = %#v, want %#v", k, gv, v)
		}
	}
	if len(d.Headers) != len(want) {
		t.Errorf("headers %v, want %v", d.Headers, want)
	}
	if pl := got[1]; pl.ContentType != "" || pl.Headers[HeaderKey] != nil {
		t.Errorf("plain message: content type %q, key header %v", pl.ContentType, pl.Headers[HeaderKey])
	}
}

// TestUnroutable publishes a key's messages where the middle one has no
// binding: it is returned and fails terminally, and the key goes on.
func TestUnroutable(t *testing.T) {
	t.Parallel()
	a := newAdmin(t)
	ex := a.exchange(t, "unroutable")
	read := a.consume(t, a.queue(t, ex, "bound", nil))
	p := newPublisher(t, testConfig(testAddr()))

	msgs := []*sink.Message{
		msg(ex+"/bound", "1", "k", "1"), msg(ex+"/nowhere", "2", "k", "2"), msg(ex+"/bound", "3", "k", "3"),
	}
	errs := p.Publish(testCtx(t), msgs)
	if errs[0] != nil || errs[2] != nil {
		t.Fatalf("routable messages: %v, %v", errs[0], errs[2])
	}
	if !sink.IsTerminal(errs[1]) || !errors.Is(errs[1], ErrUnroutable) || !strings.Contains(errs[1].Error(), "NO_ROUTE") {
		t.Fatalf("unroutable: want terminal NO_ROUTE, got %v", errs[1])
	}
	if got := waitDeliveries(t, read, 2); got[0].MessageId != "1" || got[1].MessageId != "3" {
		t.Fatalf("arrived %s, %s", got[0].MessageId, got[1].MessageId)
	}

	// Without mandatory the broker drops it and confirms.
	cfg := testConfig(testAddr())
	no := false
	cfg.Mandatory = &no
	if err := newPublisher(t, cfg).Publish(testCtx(t), msgs[1:2])[0]; err != nil {
		t.Fatalf("not mandatory: %v", err)
	}
}

// TestNackHoldsBackKey fills a queue that refuses publishes when full: the
// first message is confirmed, the second nacked (retryable), and the third
// of the same key is not sent at all, so nothing of the key can land after
// the refused one.
func TestNackHoldsBackKey(t *testing.T) {
	t.Parallel()
	a := newAdmin(t)
	ex := a.exchange(t, "full")
	q := a.queue(t, ex, "rk", amqp.Table{"x-max-length": int32(1), "x-overflow": "reject-publish"})
	p := newPublisher(t, testConfig(testAddr()))

	msgs := []*sink.Message{
		msg(ex+"/rk", "1", "k", "1"), msg(ex+"/rk", "2", "k", "2"), msg(ex+"/rk", "3", "k", "3"),
	}
	errs := p.Publish(testCtx(t), msgs)
	if errs[0] != nil {
		t.Fatalf("first: %v", errs[0])
	}
	if errs[1] == nil || sink.IsTerminal(errs[1]) || !errors.Is(errs[1], ErrNacked) {
		t.Fatalf("second: want retryable nack, got %v", errs[1])
	}
	if !errors.Is(errs[2], keyorder.ErrHeldBack) || sink.IsTerminal(errs[2]) {
		t.Fatalf("third: want held back, got %v", errs[2])
	}
	st, err := a.ch.QueueDeclarePassive(q, false, false, false, false, amqp.Table{"x-max-length": int32(1), "x-overflow": "reject-publish"})
	if err != nil {
		t.Fatal(err)
	}
	if st.Messages != 1 {
		t.Fatalf("queue holds %d messages, want 1", st.Messages)
	}
}

// TestManyInFlightOfOneKey: with max_in_flight_per_key above 1, a key's
// messages travel together; a queue full by its bytes refuses the second
// (too big for the room left) and takes the third (small enough): the
// second, overtaken, fails terminally (to the dead letters) rather than
// being sent again after the third. With the default of one, the third is
// held back instead (TestNackHoldsBackKey).
func TestManyInFlightOfOneKey(t *testing.T) {
	t.Parallel()
	a := newAdmin(t)
	ex := a.exchange(t, "bytes")
	args := amqp.Table{"x-max-length-bytes": int32(10), "x-overflow": "reject-publish"}
	q := a.queue(t, ex, "rk", args)
	cfg := testConfig(testAddr())
	cfg.MaxInFlightPerKey = 3
	p := newPublisher(t, cfg)

	msgs := []*sink.Message{
		msg(ex+"/rk", "1", "k", "12345"), msg(ex+"/rk", "2", "k", "1234567890"), msg(ex+"/rk", "3", "k", "12345"),
	}
	errs := p.Publish(testCtx(t), msgs)
	if errs[0] != nil || errs[2] != nil {
		t.Fatalf("first and third: %v, %v; want both delivered", errs[0], errs[2])
	}
	if !sink.IsTerminal(errs[1]) || !errors.Is(errs[1], keyorder.ErrOvertaken) || !errors.Is(errs[1], ErrNacked) {
		t.Fatalf("second: want a terminal nack overtaken by the third, got %v", errs[1])
	}
	st, err := a.ch.QueueDeclarePassive(q, false, false, false, false, args)
	if err != nil {
		t.Fatal(err)
	}
	if st.Messages != 2 {
		t.Fatalf("queue holds %d messages, want 2", st.Messages)
	}
}

func TestTerminalBeforeSending(t *testing.T) {
	t.Parallel()
	a := newAdmin(t)
	ex := a.exchange(t, "terminal")
	read := a.consume(t, a.queue(t, ex, "rk", nil))
	cfg := testConfig(testAddr())
	cfg.MaxMessageBytes = 100
	p := newPublisher(t, cfg)

	missing := "missing-" + suffix()
	msgs := []*sink.Message{
		msg(ex+"/rk", "big", "k", strings.Repeat("x", 101)),
		msg("no-slash", "dest", "k", "x"),
		msg(ex+"/"+strings.Repeat("r", 256), "long", "k", "x"),
		msg(missing+"/rk", "missing", "k", "x"),
		nil,
		msg(ex+"/rk", "ok", "k", strings.Repeat("x", 100)),
	}
	errs := p.Publish(testCtx(t), msgs)
	for i, want := range []error{ErrTooLarge, errBadDestination, errBadDestination, ErrNoExchange, nil} {
		if !sink.IsTerminal(errs[i]) || (want != nil && !errors.Is(errs[i], want)) {
			t.Errorf("message %d: want terminal %v, got %v", i, want, errs[i])
		}
	}
	if errs[5] != nil {
		t.Fatalf("good message after terminal ones: %v", errs[5])
	}
	if got := waitDeliveries(t, read, 1); len(got) != 1 || got[0].MessageId != "ok" {
		t.Fatalf("arrived %d messages", len(got))
	}

	cfg.Exchange = missing
	if err := newPublisher(t, cfg).Ping(testCtx(t)); !errors.Is(err, ErrNoExchange) {
		t.Fatalf("ping with a missing exchange: %v", err)
	}
	cfg.Exchange = ex
	if err := newPublisher(t, cfg).Ping(testCtx(t)); err != nil {
		t.Fatalf("ping: %v", err)
	}
}

// TestExchangeDeletedLater deletes an exchange the publisher already
// checked: the broker closes the channel (retryable), the publisher
// reconnects, and the next attempt finds the exchange missing (terminal).
func TestExchangeDeletedLater(t *testing.T) {
	t.Parallel()
	a := newAdmin(t)
	ex := a.exchange(t, "deleted")
	a.queue(t, ex, "rk", nil)
	other := a.exchange(t, "other")
	read := a.consume(t, a.queue(t, other, "rk", nil))
	p := newPublisher(t, testConfig(testAddr()))

	if err := p.Publish(testCtx(t), []*sink.Message{msg(ex+"/rk", "1", "", "x")})[0]; err != nil {
		t.Fatal(err)
	}
	if err := a.ch.ExchangeDelete(ex, false, false); err != nil {
		t.Fatal(err)
	}
	err := p.Publish(testCtx(t), []*sink.Message{msg(ex+"/rk", "2", "", "x")})[0]
	if err == nil || sink.IsTerminal(err) {
		t.Fatalf("publish to an exchange deleted after its check: want retryable, got %v", err)
	}
	errs := p.Publish(testCtx(t), []*sink.Message{msg(ex+"/rk", "3", "", "x"), msg(other+"/rk", "4", "", "x")})
	if !errors.Is(errs[0], ErrNoExchange) || !sink.IsTerminal(errs[0]) {
		t.Fatalf("after reconnecting: want terminal ErrNoExchange, got %v", errs[0])
	}
	if errs[1] != nil {
		t.Fatalf("other exchange: %v", errs[1])
	}
	waitDeliveries(t, read, 1)
}

func TestClose(t *testing.T) {
	t.Parallel()
	p := newPublisher(t, testConfig(testAddr()))
	if err := p.Ping(testCtx(t)); err != nil {
		t.Fatalf("ping: %v", err)
	}
	if err := p.Close(testCtx(t)); err != nil {
		t.Fatalf("close: %v", err)
	}
	err := p.Publish(testCtx(t), []*sink.Message{msg("/q", "1", "", "x")})[0]
	if !errors.Is(err, ErrClosed) || sink.IsTerminal(err) {
		t.Fatalf("publish after close: want retryable ErrClosed, got %v", err)
	}
	if err := p.Close(testCtx(t)); err != nil {
		t.Fatalf("second close: %v", err)
	}
}

func TestConnectFailureIsRetryable(t *testing.T) {
	t.Parallel()
	p := newPublisher(t, testConfig("127.0.0.1:1")) // nothing listens there
	err := p.Publish(testCtx(t), []*sink.Message{msg("/q", "1", "", "x")})[0]
	if err == nil || sink.IsTerminal(err) {
		t.Fatalf("want a retryable connect error, got %v", err)
	}
	if err := p.Ping(testCtx(t)); err == nil {
		t.Fatal("ping succeeded without a server")
	}
}
