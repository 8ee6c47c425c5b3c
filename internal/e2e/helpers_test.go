// Package e2e tests the relay end to end: real PostgreSQL, Kafka through the
// in-process kfake broker, the relay as a library or as a process.
package e2e

import (
	"context"
	"fmt"
	"log/slog"
	"os"
	"sync"
	"testing"
	"time"

	"github.com/twmb/franz-go/pkg/kfake"
	"github.com/twmb/franz-go/pkg/kgo"

	"github.com/outbox-relay/outbox-relay/internal/app"
	"github.com/outbox-relay/outbox-relay/internal/config"
	"github.com/outbox-relay/outbox-relay/internal/fakekafka"
	// Registers the database drivers (postgres, mysql) that configurations name.
	_ "github.com/outbox-relay/outbox-relay/internal/source/all"
)

// kafkaCluster starts the in-process broker for sinks whose
// auto_create_topics is off (the default): it creates no topic on request.
func kafkaCluster(t *testing.T, opts ...kfake.Opt) *kfake.Cluster {
	t.Helper()
	return kafkaClusterFor(t, false, opts...)
}

// kafkaClusterFor starts the in-process broker for sinks whose
// auto_create_topics is autoCreate.
func kafkaClusterFor(t *testing.T, autoCreate bool, opts ...kfake.Opt) *kfake.Cluster {
	t.Helper()
	c, err := fakekafka.New(autoCreate, opts...)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(c.Close)
	return c
}

// testLogger logs warnings and errors to the test log.
func testLogger(t *testing.T) *slog.Logger {
	if testing.Verbose() {
		return slog.New(slog.NewTextHandler(os.Stderr, &slog.HandlerOptions{Level: slog.LevelInfo}))
	}
	return slog.New(slog.NewTextHandler(tWriter{t}, &slog.HandlerOptions{Level: slog.LevelWarn}))
}

type tWriter struct{ t *testing.T }

func (w tWriter) Write(p []byte) (int, error) {
	w.t.Log(string(p))
	return len(p), nil
}

// baseConfig is a config with one database and one Kafka sink; sources are
// the caller's.
func baseConfig(dsn string, brokers []string, sources ...config.Source) *config.Config {
	cfg := &config.Config{
		Admin:     config.Admin{Listen: "off"},
		Databases: map[string]config.Database{"main": {DSN: dsn}},
		Sinks:     map[string]config.Sink{"kafka": {Type: "kafka", Brokers: brokers}},
		Sources:   sources,
		Shutdown:  config.Shutdown{Timeout: config.Duration(5 * time.Second)},
	}
	for i := range cfg.Sources {
		if cfg.Sources[i].Poll.Max == 0 {
			cfg.Sources[i].Poll = config.Poll{Min: config.Duration(10 * time.Millisecond), Max: config.Duration(100 * time.Millisecond)}
		}
	}
	cfg.ApplyDefaults()
	return cfg
}

// runRelay migrates and runs the relay in this process until the test ends
// (or stop is called).
func runRelay(t *testing.T, cfg *config.Config, opts ...app.Option) (stop func()) {
	_, stop = runApp(t, cfg, opts...)
	return stop
}

// runApp is runRelay that also returns the App.
func runApp(t *testing.T, cfg *config.Config, opts ...app.Option) (a *app.App, stop func()) {
	t.Helper()
	return runAppLogged(t, cfg, testLogger(t), opts...)
}

// runAppLogged is runApp logging to log.
func runAppLogged(t *testing.T, cfg *config.Config, log *slog.Logger, opts ...app.Option) (a *app.App, stop func()) {
	t.Helper()
	if err := cfg.Validate(); err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithCancel(context.Background())
	a, err := app.Open(ctx, cfg, log, append([]app.Option{app.WithKafkaOptions(kgo.MetadataMinAge(20 * time.Millisecond))}, opts...)...)
	if err != nil {
		cancel()
		t.Fatal(err)
	}
	if err := a.Migrate(ctx); err != nil {
		cancel()
		a.Close()
		t.Fatal(err)
	}
	done := make(chan error, 1)
	go func() { done <- a.Run(ctx) }()
	var once sync.Once
	stop = func() {
		once.Do(func() {
			cancel()
			if err := <-done; err != nil {
				t.Errorf("relay run: %v", err)
			}
			a.Close()
		})
	}
	t.Cleanup(stop)
	return a, stop
}

// collector consumes topics from the start and keeps every record.
type collector struct {
	cl   *kgo.Client
	mu   sync.Mutex
	recs []*kgo.Record
	stop context.CancelFunc
	done chan struct{}
}

func collect(t *testing.T, brokers []string, topics ...string) *collector {
	t.Helper()
	return collectWith(t, brokers, nil, topics...)
}

// collectCommitted is collect as a read_committed consumer sees the topics:
// records of aborted or open transactions left out.
func collectCommitted(t *testing.T, brokers []string, topics ...string) *collector {
	t.Helper()
	return collectWith(t, brokers, []kgo.Opt{kgo.FetchIsolationLevel(kgo.ReadCommitted())}, topics...)
}

func collectWith(t *testing.T, brokers []string, extra []kgo.Opt, topics ...string) *collector {
	t.Helper()
	cl, err := kgo.NewClient(append([]kgo.Opt{kgo.SeedBrokers(brokers...), kgo.ConsumeTopics(topics...),
		kgo.ConsumeResetOffset(kgo.NewOffset().AtStart()), kgo.MetadataMinAge(50 * time.Millisecond)}, extra...)...)
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithCancel(context.Background())
	c := &collector{cl: cl, stop: cancel, done: make(chan struct{})}
	go func() {
		defer close(c.done)
		for ctx.Err() == nil {
			fs := cl.PollFetches(ctx)
			c.mu.Lock()
			fs.EachRecord(func(r *kgo.Record) { c.recs = append(c.recs, r) })
			c.mu.Unlock()
		}
	}()
	t.Cleanup(func() { cancel(); <-c.done; cl.Close() })
	return c
}

func (c *collector) records() []*kgo.Record {
	c.mu.Lock()
	defer c.mu.Unlock()
	return append([]*kgo.Record(nil), c.recs...)
}

// waitFor polls until cond holds or the timeout passes.
func waitFor(t *testing.T, timeout time.Duration, what string, cond func() (bool, string)) {
	t.Helper()
	deadline := time.Now().Add(timeout)
	for {
		ok, status := cond()
		if ok {
			return
		}
		if time.Now().After(deadline) {
			t.Fatalf("timed out after %s waiting for %s: %s", timeout, what, status)
		}
		time.Sleep(20 * time.Millisecond)
	}
}

// uniqueIDs waits until the collector holds n distinct event ids.
func (c *collector) waitDistinct(t *testing.T, n int, timeout time.Duration) []*kgo.Record {
	t.Helper()
	waitFor(t, timeout, fmt.Sprintf("%d distinct events", n), func() (bool, string) {
		got := len(distinct(c.records()))
		return got >= n, fmt.Sprintf("have %d", got)
	})
	return c.records()
}

func header(r *kgo.Record, k string) (string, bool) {
	for _, h := range r.Headers {
		if h.Key == k {
			return string(h.Value), true
		}
	}
	return "", false
}

// distinct maps event id to its first record.
func distinct(recs []*kgo.Record) map[string]*kgo.Record {
	m := map[string]*kgo.Record{}
	for _, r := range recs {
		id, _ := header(r, "event_id")
		if _, ok := m[id]; !ok {
			m[id] = r
		}
	}
	return m
}

// javaPartition is the partition the Java client picks for key among n.
func javaPartition(key []byte, n int) int32 {
	return int32(kgo.StickyKeyPartitioner(nil).ForTopic("x").Partition(&kgo.Record{Key: key}, n))
}
