package nats

import (
	"bytes"
	"log/slog"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/nats-io/nats.go/jetstream"

	"github.com/outbox-relay/outbox-relay/internal/sink"
	"github.com/outbox-relay/outbox-relay/internal/sink/sinkconf"
)

// logBuffer collects log lines from several goroutines.
type logBuffer struct {
	mu  sync.Mutex
	buf bytes.Buffer
}

func (b *logBuffer) Write(p []byte) (int, error) {
	b.mu.Lock()
	defer b.mu.Unlock()
	return b.buf.Write(p)
}

func (b *logBuffer) String() string {
	b.mu.Lock()
	defer b.mu.Unlock()
	return b.buf.String()
}

func (b *logBuffer) logger() *slog.Logger { return slog.New(slog.NewTextHandler(b, nil)) }

const shortWarning = "duplicate window is shorter than the retry horizon"

func TestDuplicateWindow(t *testing.T) {
	short := newStream(t, func(c *jetstream.StreamConfig) { c.Duplicates = time.Minute })
	long := newStream(t, func(c *jetstream.StreamConfig) { c.Duplicates = 10 * time.Minute })
	var logs logBuffer
	cfg := testConfig(serverAddr())
	cfg.RetryHorizon = sinkconf.Duration(5 * time.Minute)
	p := newPublisher(t, cfg, WithLogger(logs.logger()))

	w, err := p.DuplicateWindow(testCtx(t), long.subject("a"))
	if err != nil {
		t.Fatal(err)
	}
	if w.Stream != long.name || w.Window != 10*time.Minute || w.Short() {
		t.Fatalf("long window: got %+v", w)
	}
	if strings.Contains(logs.String(), shortWarning) {
		t.Fatalf("warned about a long enough window: %s", logs.String())
	}
	w, err = p.DuplicateWindow(testCtx(t), short.subject("a"))
	if err != nil {
		t.Fatal(err)
	}
	if w.Stream != short.name || w.Window != time.Minute || w.Horizon != 5*time.Minute || !w.Short() {
		t.Fatalf("short window: got %+v", w)
	}
	if !strings.Contains(logs.String(), shortWarning) || !strings.Contains(logs.String(), short.name) {
		t.Fatalf("no warning naming the stream: %s", logs.String())
	}
	if _, err := p.DuplicateWindow(testCtx(t), "outbox-test-nostream-"+suffix()); err == nil {
		t.Fatal("DuplicateWindow found a stream for a subject no stream captures")
	}
}

// The first publishes to a stream's subjects warn once about its short
// window, in the background.
func TestFirstPublishWarnsOnce(t *testing.T) {
	short := newStream(t, func(c *jetstream.StreamConfig) { c.Duplicates = time.Minute })
	var logs logBuffer
	p := newPublisher(t, testConfig(serverAddr()), WithLogger(logs.logger()))
	for i := range 3 {
		msgs := []*sink.Message{msg(short.subject("a"), "k", i), msg(short.subject("b"), "k", i)}
		for _, err := range p.Publish(testCtx(t), msgs) {
			if err != nil {
				t.Fatal(err)
			}
		}
	}
	deadline := time.Now().Add(10 * time.Second)
	for !strings.Contains(logs.String(), shortWarning) {
		if time.Now().After(deadline) {
			t.Fatalf("no warning after publishing to a stream with a short window: %s", logs.String())
		}
		time.Sleep(10 * time.Millisecond)
	}
	time.Sleep(200 * time.Millisecond) // let the other subject's check finish
	if n := strings.Count(logs.String(), shortWarning); n != 1 {
		t.Fatalf("warned %d times about one stream, want once: %s", n, logs.String())
	}
}
