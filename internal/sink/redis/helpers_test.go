package redis

import (
	"context"
	"crypto/rand"
	"encoding/hex"
	"fmt"
	"os"
	"strings"
	"testing"
	"time"

	goredis "github.com/redis/go-redis/v9"

	"github.com/outbox-relay/outbox-relay/internal/sink"
	"github.com/outbox-relay/outbox-relay/internal/sink/sinkconf"
	"github.com/outbox-relay/outbox-relay/internal/sink/sinktest"
)

// serverAddr is the Redis server the tests use: OUTBOX_RELAY_TEST_REDIS
// (host:port), by default the local server.
func serverAddr() string {
	if v := os.Getenv("OUTBOX_RELAY_TEST_REDIS"); v != "" {
		return strings.TrimPrefix(v, "redis://")
	}
	return "127.0.0.1:6379"
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

// requireServer skips t under -short: it needs the Redis server.
func requireServer(t testing.TB) {
	t.Helper()
	if testing.Short() {
		t.Skip("needs the Redis server (-short)")
	}
}

// admin connects to the server directly, for setting up and reading back.
//
// With -short, tests that need the server are skipped.
func admin(t testing.TB) *goredis.Client {
	t.Helper()
	requireServer(t)
	c := goredis.NewClient(&goredis.Options{Addr: serverAddr()})
	t.Cleanup(func() { _ = c.Close() })
	if err := c.Ping(testCtx(t)).Err(); err != nil {
		t.Fatalf("connect to Redis at %s (start it with scripts/services.sh redis): %v", serverAddr(), err)
	}
	return c
}

// newKey returns a unique key name that is deleted when the test ends.
func newKey(t testing.TB, c *goredis.Client, what string) string {
	t.Helper()
	k := fmt.Sprintf("outbox-test:%s:%s", what, suffix())
	t.Cleanup(func() {
		ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
		defer cancel()
		if err := c.Del(ctx, k).Err(); err != nil {
			t.Logf("delete %s: %v", k, err)
		}
	})
	return k
}

// entries reads stream from after the entry id after ("-" for the start).
func entries(ctx context.Context, c *goredis.Client, stream, after string) ([]goredis.XMessage, error) {
	start := "-"
	if after != "" {
		start = "(" + after
	}
	return c.XRange(ctx, stream, start, "+").Result()
}

// received converts an entry to what the conformance suite reads.
func received(e goredis.XMessage) sinktest.Received {
	r := sinktest.Received{}
	for f, v := range e.Values {
		s, _ := v.(string)
		switch {
		case f == FieldID:
			r.ID = s
		case f == FieldKey:
			r.Key = []byte(s)
		case f == FieldPayload:
			r.Payload = []byte(s)
		case strings.HasPrefix(f, HeaderPrefix):
			r.Headers = append(r.Headers, sink.Header{Key: strings.TrimPrefix(f, HeaderPrefix), Value: []byte(s)})
		}
	}
	return r
}

func testConfig(addr string) Config {
	return Config{URL: "redis://" + addr, Timeout: sinkconf.Duration(2 * time.Second)}
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
