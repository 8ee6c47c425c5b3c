package rabbitmq

import (
	"context"
	"crypto/rand"
	"encoding/hex"
	"os"
	"sync"
	"testing"
	"time"

	amqp "github.com/rabbitmq/amqp091-go"

	"github.com/outbox-relay/outbox-relay/internal/sink"
	"github.com/outbox-relay/outbox-relay/internal/sink/sinktest"
)

// testAddr is the local RabbitMQ (OUTBOX_RELAY_TEST_RABBITMQ overrides).
func testAddr() string {
	if a := os.Getenv("OUTBOX_RELAY_TEST_RABBITMQ"); a != "" {
		return a
	}
	return "127.0.0.1:5672"
}

func urlFor(addr string) string { return "amqp://guest:guest@" + addr + "/" }

func suffix() string {
	b := make([]byte, 6)
	_, _ = rand.Read(b)
	return hex.EncodeToString(b)
}

func testCtx(t *testing.T) context.Context {
	ctx, cancel := context.WithTimeout(t.Context(), 30*time.Second)
	t.Cleanup(cancel)
	return ctx
}

// testConfig is a configuration for addr with short timeouts.
func testConfig(addr string) Config {
	return Config{URL: urlFor(addr), ConfirmTimeout: 10 * time.Second, ConnectTimeout: 2 * time.Second}
}

func newPublisher(t testing.TB, cfg Config) *Publisher {
	t.Helper()
	p, err := New(cfg)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = p.Close(context.Background()) })
	return p
}

// admin is the tests' own connection, straight to the server, to declare,
// read back and delete.
type admin struct {
	conn *amqp.Connection
	ch   *amqp.Channel
}

func newAdmin(t testing.TB) *admin {
	t.Helper()
	conn, err := amqp.Dial(urlFor(testAddr()))
	if err != nil {
		t.Fatalf("RabbitMQ at %s (start it with scripts/services.sh rabbitmq): %v", testAddr(), err)
	}
	ch, err := conn.Channel()
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = conn.Close() })
	return &admin{conn: conn, ch: ch}
}

// exchange declares a direct exchange with a unique name, deleted when the
// test ends.
func (a *admin) exchange(t testing.TB, prefix string) string {
	t.Helper()
	name := prefix + "-" + suffix()
	if err := a.ch.ExchangeDeclare(name, amqp.ExchangeDirect, false, false, false, false, nil); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = a.ch.ExchangeDelete(name, false, false) })
	return name
}

// queue declares a queue with a unique name bound to exchange with key,
// deleted when the test ends.
func (a *admin) queue(t testing.TB, exchange, key string, args amqp.Table) string {
	t.Helper()
	q, err := a.ch.QueueDeclare("outbox-relay-test-"+suffix(), false, false, false, false, args)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _, _ = a.ch.QueueDelete(q.Name, false, false, false) })
	if exchange != "" {
		if err := a.ch.QueueBind(q.Name, key, exchange, false, nil); err != nil {
			t.Fatal(err)
		}
	}
	return q.Name
}

// consume reads queue in the background; the returned function gives what
// arrived so far.
func (a *admin) consume(t testing.TB, queue string) func() []amqp.Delivery {
	t.Helper()
	ch, err := a.conn.Channel()
	if err != nil {
		t.Fatal(err)
	}
	ds, err := ch.Consume(queue, "", true, false, false, false, nil)
	if err != nil {
		t.Fatal(err)
	}
	var mu sync.Mutex
	var got []amqp.Delivery
	go func() {
		for d := range ds {
			mu.Lock()
			got = append(got, d)
			mu.Unlock()
		}
	}()
	return func() []amqp.Delivery {
		mu.Lock()
		defer mu.Unlock()
		return append([]amqp.Delivery(nil), got...)
	}
}

// waitDeliveries waits until n messages arrived.
func waitDeliveries(t testing.TB, read func() []amqp.Delivery, n int) []amqp.Delivery {
	t.Helper()
	deadline := time.Now().Add(10 * time.Second)
	for {
		got := read()
		if len(got) >= n || time.Now().After(deadline) {
			if len(got) < n {
				t.Fatalf("%d messages arrived, want %d", len(got), n)
			}
			return got
		}
		time.Sleep(10 * time.Millisecond)
	}
}

// received turns a delivery into what the conformance suite compares.
func received(d amqp.Delivery) sinktest.Received {
	r := sinktest.Received{ID: d.MessageId, Payload: d.Body}
	for k, v := range d.Headers {
		var b []byte
		switch v := v.(type) {
		case string:
			b = []byte(v)
		case []byte:
			b = v
		default:
			continue
		}
		if k == HeaderKey {
			r.Key = b
		}
		r.Headers = append(r.Headers, sink.Header{Key: k, Value: b})
	}
	return r
}

func msg(dest, id, key string, payload string) *sink.Message {
	m := &sink.Message{ID: id, Destination: dest, Payload: []byte(payload),
		Headers: []sink.Header{{Key: "event_id", Value: []byte(id)}}}
	if key != "" {
		m.Key = []byte(key)
	}
	return m
}
