package mqtt

import (
	"context"
	"crypto/rand"
	"encoding/hex"
	"net"
	"os"
	"sync"
	"testing"
	"time"

	"github.com/eclipse/paho.golang/paho"

	"github.com/outbox-relay/outbox-relay/internal/sink"
	"github.com/outbox-relay/outbox-relay/internal/sink/sinktest"
)

// testAddr is the local Mosquitto (OUTBOX_RELAY_TEST_MQTT overrides).
func testAddr() string {
	if a := os.Getenv("OUTBOX_RELAY_TEST_MQTT"); a != "" {
		return a
	}
	return "127.0.0.1:1883"
}

func suffix() string {
	b := make([]byte, 6)
	_, _ = rand.Read(b)
	return hex.EncodeToString(b)
}

func testCtx(t testing.TB) context.Context {
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	t.Cleanup(cancel)
	return ctx
}

func testConfig(addr string) Config {
	return Config{URL: "mqtt://" + addr, PublishTimeout: 10 * time.Second, ConnectTimeout: 2 * time.Second}
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

// subscriber is the tests' own client, straight to the server, subscribed
// with QoS 1 to a unique topic prefix.
type subscriber struct {
	prefix string
	mu     sync.Mutex
	got    []*paho.Publish
}

func subscribe(t testing.TB) *subscriber {
	t.Helper()
	s := &subscriber{prefix: "outbox-relay-test/" + suffix()}
	conn, err := net.DialTimeout("tcp", testAddr(), 5*time.Second)
	if err != nil {
		t.Fatalf("Mosquitto at %s (start it with scripts/services.sh mosquitto): %v", testAddr(), err)
	}
	cli := paho.NewClient(paho.ClientConfig{
		ClientID: "outbox-relay-test-sub-" + suffix(),
		Conn:     conn,
		OnPublishReceived: []func(paho.PublishReceived) (bool, error){func(r paho.PublishReceived) (bool, error) {
			s.mu.Lock()
			s.got = append(s.got, r.Packet)
			s.mu.Unlock()
			return true, nil
		}},
	})
	if _, err := cli.Connect(testCtx(t), &paho.Connect{ClientID: cli.ClientID(), CleanStart: true, KeepAlive: 30}); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = cli.Disconnect(&paho.Disconnect{}) })
	if _, err := cli.Subscribe(testCtx(t), &paho.Subscribe{
		Subscriptions: []paho.SubscribeOptions{{Topic: s.prefix + "/#", QoS: 1}},
	}); err != nil {
		t.Fatal(err)
	}
	return s
}

func (s *subscriber) messages() []*paho.Publish {
	s.mu.Lock()
	defer s.mu.Unlock()
	return append([]*paho.Publish(nil), s.got...)
}

// wait waits until n messages arrived.
func (s *subscriber) wait(t testing.TB, n int) []*paho.Publish {
	t.Helper()
	deadline := time.Now().Add(10 * time.Second)
	for {
		got := s.messages()
		if len(got) >= n {
			return got
		}
		if time.Now().After(deadline) {
			t.Fatalf("%d messages arrived, want %d", len(got), n)
		}
		time.Sleep(10 * time.Millisecond)
	}
}

func property(p *paho.Publish, key string) (string, bool) {
	if p.Properties == nil {
		return "", false
	}
	for _, u := range p.Properties.User {
		if u.Key == key {
			return u.Value, true
		}
	}
	return "", false
}

// received turns a delivery into what the conformance suite compares.
func received(p *paho.Publish) sinktest.Received {
	id, _ := property(p, PropertyEventID)
	r := sinktest.Received{ID: id, Payload: p.Payload}
	if k, ok := property(p, PropertyKey); ok {
		r.Key = []byte(k)
	}
	if p.Properties != nil {
		for _, u := range p.Properties.User {
			r.Headers = append(r.Headers, sink.Header{Key: u.Key, Value: []byte(u.Value)})
		}
	}
	return r
}

func msg(topic, id, key, payload string) *sink.Message {
	m := &sink.Message{ID: id, Destination: topic, Payload: []byte(payload)}
	if key != "" {
		m.Key = []byte(key)
	}
	return m
}
