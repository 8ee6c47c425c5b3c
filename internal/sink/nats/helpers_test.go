package nats

import (
	"context"
	"crypto/rand"
	"encoding/hex"
	"errors"
	"os"
	"strings"
	"testing"
	"time"

	natsclient "github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"

	"github.com/outbox-relay/outbox-relay/internal/sink"
	"github.com/outbox-relay/outbox-relay/internal/sink/sinkconf"
	"github.com/outbox-relay/outbox-relay/internal/sink/sinktest"
)

// serverAddr is the NATS server the tests use: OUTBOX_RELAY_TEST_NATS
// (host:port), by default the local server.
func serverAddr() string {
	if v := os.Getenv("OUTBOX_RELAY_TEST_NATS"); v != "" {
		return strings.TrimPrefix(v, "nats://")
	}
	return "127.0.0.1:4222"
}

func suffix() string {
	var b [5]byte
	_, _ = rand.Read(b[:])
	return hex.EncodeToString(b[:])
}

func testCtx(t testing.TB) context.Context {
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	t.Cleanup(cancel)
	return ctx
}

// requireServer skips t under -short: it needs the NATS server.
func requireServer(t testing.TB) {
	t.Helper()
	if testing.Short() {
		t.Skip("needs the NATS server (-short)")
	}
}

// admin connects to the server directly, for setting up and reading back.
//
// With -short, tests that need the server are skipped.
func admin(t testing.TB) jetstream.JetStream {
	t.Helper()
	requireServer(t)
	nc, err := natsclient.Connect("nats://" + serverAddr())
	if err != nil {
		t.Fatalf("connect to NATS at %s (start it with scripts/services.sh nats): %v", serverAddr(), err)
	}
	t.Cleanup(nc.Close)
	js, err := jetstream.New(nc)
	if err != nil {
		t.Fatal(err)
	}
	return js
}

// testStream is a stream of one test, capturing prefix.>.
type testStream struct {
	js     jetstream.JetStream
	name   string
	prefix string
}

// newStream creates a stream with a unique name and subject prefix and
// deletes it when the test ends. change adjusts its configuration.
func newStream(t testing.TB, change ...func(*jetstream.StreamConfig)) *testStream {
	t.Helper()
	js := admin(t)
	sfx := suffix()
	s := &testStream{js: js, name: "OUTBOX_TEST_" + sfx, prefix: "outbox-test-" + sfx}
	cfg := jetstream.StreamConfig{
		Name:       s.name,
		Subjects:   []string{s.prefix + ".>"},
		Storage:    jetstream.MemoryStorage,
		Duplicates: 10 * time.Minute,
	}
	for _, f := range change {
		f(&cfg)
	}
	if _, err := js.CreateStream(testCtx(t), cfg); err != nil {
		t.Fatalf("create stream: %v", err)
	}
	t.Cleanup(func() {
		ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
		defer cancel()
		if err := js.DeleteStream(ctx, s.name); err != nil {
			t.Logf("delete stream %s: %v", s.name, err)
		}
	})
	return s
}

func (s *testStream) subject(name string) string { return s.prefix + "." + name }

// stored is a message read back from the stream.
type stored struct {
	Subject string
	Header  natsclient.Header
	Data    []byte
}

// read returns the stream's messages from sequence from on, in order.
func (s *testStream) read(ctx context.Context, from uint64) ([]stored, error) {
	st, err := s.js.Stream(ctx, s.name)
	if err != nil {
		return nil, err
	}
	var out []stored
	for seq := from; ; seq++ {
		m, err := st.GetMsg(ctx, seq)
		if errors.Is(err, jetstream.ErrMsgNotFound) {
			info, ierr := st.Info(ctx)
			if ierr != nil {
				return out, ierr
			}
			if seq > info.State.LastSeq {
				return out, nil
			}
			continue // deleted
		}
		if err != nil {
			return out, err
		}
		out = append(out, stored{Subject: m.Subject, Header: m.Header, Data: m.Data})
	}
}

// all reads every message of the stream.
func (s *testStream) all(t testing.TB) []stored {
	t.Helper()
	got, err := s.read(testCtx(t), 1)
	if err != nil {
		t.Fatalf("read stream %s: %v", s.name, err)
	}
	return got
}

// received converts a stored message to what the conformance suite reads.
func received(m stored) sinktest.Received {
	r := sinktest.Received{ID: m.Header.Get(HeaderMsgID), Payload: m.Data}
	if vs, ok := m.Header[HeaderKey]; ok && len(vs) > 0 {
		r.Key = []byte(vs[0])
	}
	for k, vs := range m.Header {
		for _, v := range vs {
			r.Headers = append(r.Headers, sink.Header{Key: k, Value: []byte(v)})
		}
	}
	return r
}

// testConfig is a configuration for addr with quick reconnects.
func testConfig(addr string) Config {
	return Config{
		URL:           "nats://" + addr,
		AckTimeout:    sinkconf.Duration(2 * time.Second),
		ReconnectWait: sinkconf.Duration(50 * time.Millisecond),
	}
}

func newPublisher(t testing.TB, cfg Config, opts ...Option) *Publisher {
	t.Helper()
	p, err := New(cfg, opts...)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
		defer cancel()
		_ = p.Close(ctx)
	})
	return p
}

// waitConnected waits until p's connection is up.
func waitConnected(t testing.TB, p *Publisher) {
	t.Helper()
	ctx := testCtx(t)
	for p.Ping(ctx) != nil {
		select {
		case <-ctx.Done():
			t.Fatalf("not connected: %v", p.Ping(context.Background()))
		case <-time.After(10 * time.Millisecond):
		}
	}
}
