// Package demo runs the relay end to end with no configuration: an
// in-process Kafka broker (kfake), the local PostgreSQL, a throwaway outbox
// table that producers fill (some transactions rolled back), and a consumer
// that checks what arrives: every committed event, no rolled-back one, and
// per-key order.
package demo

import (
	"context"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"math/rand/v2"
	"sync"
	"sync/atomic"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgxpool"
	"github.com/twmb/franz-go/pkg/kfake"
	"github.com/twmb/franz-go/pkg/kgo"

	"github.com/outbox-relay/outbox-relay/internal/app"
	"github.com/outbox-relay/outbox-relay/internal/config"
	"github.com/outbox-relay/outbox-relay/internal/fakekafka"
	// Registers the database drivers (postgres, mysql) that configurations name.
	_ "github.com/outbox-relay/outbox-relay/internal/source/all"
)

// DefaultDSN is the local PostgreSQL as the Debian package sets it up.
const DefaultDSN = "postgres://postgres@127.0.0.1:5432/postgres?sslmode=disable"

// Options size the demo.
type Options struct {
	DSN    string
	Events int // committed events to write
	// Backlog is how many events to write while the relay is stopped, to
	// show it draining a backlog (0: skip that part).
	Backlog   int
	Producers int
	Keys      int
	Out       io.Writer
	Logger    *slog.Logger
}

var eventTypes = []string{"order.created", "order.paid", "order.shipped"}

// Result is what the demo observed.
type Result struct {
	Committed, RolledBack, Received, Duplicates, OutOfOrder int
	Elapsed                                                 time.Duration
	BacklogRate                                             float64 // events/s draining the backlog
}

// Run executes the demo and prints what it sees.
func Run(ctx context.Context, o Options) (*Result, error) {
	out := o.Out
	suffix := fmt.Sprintf("%06x", rand.N(1<<24))
	schema, relaySchema := "outbox_demo_"+suffix, "outbox_demo_relay_"+suffix

	pool, err := pgxpool.New(ctx, o.DSN)
	if err != nil {
		return nil, fmt.Errorf("connect to PostgreSQL: %w", err)
	}
	defer pool.Close()
	if err := pool.Ping(ctx); err != nil {
		return nil, fmt.Errorf("connect to PostgreSQL at %s (is it running? scripts/services.sh postgres starts it): %w", o.DSN, err)
	}
	_, err = pool.Exec(ctx, fmt.Sprintf(`CREATE SCHEMA %[1]s;
CREATE TABLE %[1]s.outbox (
  id UUID PRIMARY KEY DEFAULT gen_random_uuid(),
  aggregate_id TEXT NOT NULL,
  aggregate_type VARCHAR(100) NOT NULL,
  event_type VARCHAR(100) NOT NULL,
  payload JSONB NOT NULL,
  created_at TIMESTAMPTZ NOT NULL DEFAULT clock_timestamp(),
  published_at TIMESTAMPTZ,
  published BOOLEAN NOT NULL DEFAULT false
);
CREATE INDEX ON %[1]s.outbox (created_at) WHERE published = false;`, schema))
	if err != nil {
		return nil, fmt.Errorf("create demo table: %w", err)
	}
	defer func() {
		_, _ = pool.Exec(context.WithoutCancel(ctx), "DROP SCHEMA IF EXISTS "+schema+" CASCADE; DROP SCHEMA IF EXISTS "+relaySchema+" CASCADE")
	}()
	fmt.Fprintf(out, "PostgreSQL: table %s.outbox created\n", schema)

	topics := []string{"demo.orders"}
	// The broker creates topics on request as the sink's
	// auto_create_topics says (off: the demo's topic is created here).
	autoCreate := false
	cluster, err := fakekafka.New(autoCreate, kfake.SeedTopics(6, topics...))
	if err != nil {
		return nil, err
	}
	defer cluster.Close()
	brokers := cluster.ListenAddrs()
	fmt.Fprintf(out, "Kafka: in-process broker at %v, topics %v (6 partitions each)\n", brokers, topics)

	cfg := &config.Config{
		RelaySchema: relaySchema,
		Admin:       config.Admin{Listen: "off"},
		Databases:   map[string]config.Database{"local": {DSN: o.DSN}},
		Sinks:       map[string]config.Sink{"kafka": {Type: "kafka", Brokers: brokers, AutoCreateTopics: autoCreate}},
		Sources: []config.Source{{
			Name: "demo", Table: schema + ".outbox", Preset: "published-flag",
			Topic: "demo.orders", BatchSize: 1000,
		}},
	}
	cfg.ApplyDefaults()
	if err := cfg.Validate(); err != nil {
		return nil, err
	}
	stopRelay, err := startRelay(ctx, cfg, o.Logger)
	if err != nil {
		return nil, err
	}
	defer func() { _ = stopRelay() }()

	cons := newConsumer(brokers, topics)
	defer cons.close()
	go cons.run(ctx)

	fmt.Fprintf(out, "writing %d events from %d producers over %d keys (10 per transaction, 1 transaction in 20 rolled back)\n",
		o.Events, o.Producers, o.Keys)
	start := time.Now()
	var committed, rolledBack atomic.Int64
	var wg sync.WaitGroup
	errs := make(chan error, o.Producers)
	per := o.Events / o.Producers
	for p := range o.Producers {
		n := per
		if p == 0 {
			n += o.Events - per*o.Producers
		}
		wg.Go(func() {
			if err := produce(ctx, pool, schema, p, n, o.Keys, &committed, &rolledBack); err != nil {
				errs <- err
			}
		})
	}
	wg.Wait()
	close(errs)
	if err := <-errs; err != nil {
		return nil, err
	}
	fmt.Fprintf(out, "committed %d events (%d rolled back) in %s\n", committed.Load(), rolledBack.Load(), time.Since(start).Round(time.Millisecond))

	want := int(committed.Load())
	deadline := time.Now().Add(2 * time.Minute)
	tick := time.NewTicker(time.Second)
	defer tick.Stop()
	for cons.unique() < want {
		select {
		case <-ctx.Done():
			return nil, ctx.Err()
		case <-tick.C:
		}
		fmt.Fprintf(out, "  received %d / %d\n", cons.unique(), want)
		if time.Now().After(deadline) {
			return nil, fmt.Errorf("only %d of %d events arrived within 2 minutes", cons.unique(), want)
		}
	}
	elapsed := time.Since(start)
	time.Sleep(200 * time.Millisecond) // let stragglers (duplicates, rolled-back rows) show
	r := cons.result()
	r.Committed, r.RolledBack, r.Elapsed = want, int(rolledBack.Load()), elapsed
	fmt.Fprintf(out, "\nall %d committed events arrived in %s: %.0f events/s end to end\n", r.Received, elapsed.Round(time.Millisecond),
		float64(r.Received)/elapsed.Seconds())
	fmt.Fprintf(out, "rolled-back events received: %d, duplicates: %d, per-key order violations: %d\n", cons.rolledBackSeen(), r.Duplicates, r.OutOfOrder)
	if s := cons.sampleRecord(); s != nil {
		fmt.Fprintf(out, "sample: topic=%s partition=%d key=%s value=%s headers=", s.Topic, s.Partition, s.Key, s.Value)
		for _, h := range s.Headers {
			fmt.Fprintf(out, "%s=%s ", h.Key, h.Value)
		}
		fmt.Fprintln(out)
	}
	if cons.rolledBackSeen() > 0 || r.OutOfOrder > 0 {
		return r, errors.New("demo found rolled-back events or order violations")
	}
	if o.Backlog <= 0 {
		nextSteps(out)
		return r, nil
	}

	// A backlog, written while the relay is down, then drained.
	if err := stopRelay(); err != nil {
		return r, err
	}
	fmt.Fprintf(out, "\nstopped the relay; writing a backlog of %d events\n", o.Backlog)
	_, err = pool.Exec(ctx, `INSERT INTO `+schema+`.outbox (aggregate_id, aggregate_type, event_type, payload)
SELECT 'order-' || (i % $2), 'order', 'order.created',
  jsonb_build_object('producer', 99, 'seq', i, 'rollback', false, 'note', 'backlog event')
FROM generate_series(1, $1) i`, o.Backlog, o.Keys)
	if err != nil {
		return r, fmt.Errorf("write backlog: %w", err)
	}
	start = time.Now()
	if stopRelay, err = startRelay(ctx, cfg, o.Logger); err != nil {
		return r, err
	}
	want += o.Backlog
	for cons.unique() < want {
		select {
		case <-ctx.Done():
			return r, ctx.Err()
		case <-time.After(10 * time.Millisecond):
		}
		if time.Since(start) > 2*time.Minute {
			return r, fmt.Errorf("only %d of %d events arrived within 2 minutes", cons.unique(), want)
		}
	}
	drain := time.Since(start)
	r = cons.result()
	r.Committed, r.RolledBack, r.Elapsed = want, int(rolledBack.Load()), elapsed
	r.BacklogRate = float64(o.Backlog) / drain.Seconds()
	fmt.Fprintf(out, "restarted the relay: the backlog drained in %s, %.0f events/s (start-up included); order violations: %d\n",
		drain.Round(time.Millisecond), r.BacklogRate, r.OutOfOrder)
	if r.OutOfOrder > 0 {
		return r, errors.New("demo found order violations")
	}
	nextSteps(out)
	return r, nil
}

// nextSteps points at relaying a table of one's own.
func nextSteps(out io.Writer) {
	fmt.Fprint(out, `
next: relay your own outbox table
  1. write relay.yaml: a database DSN, a sink, and a source naming your table and a preset
     (README.md, "Running it" and "Presets"; examples/relay.yaml is a fuller one)
  2. outbox-relay check --config relay.yaml   # says what is missing, without changing anything
  3. outbox-relay run --config relay.yaml     # migrates its own schema, then relays until SIGTERM
`)
}

// startRelay runs a relay process for the demo until the returned stop is
// called.
func startRelay(ctx context.Context, cfg *config.Config, log *slog.Logger) (stop func() error, err error) {
	a, err := app.Open(ctx, cfg, log)
	if err != nil {
		return nil, err
	}
	if err := a.Migrate(ctx); err != nil {
		a.Close()
		return nil, err
	}
	rctx, cancel := context.WithCancel(ctx)
	done := make(chan error, 1)
	go func() { done <- a.Run(rctx) }()
	var stopped bool
	return func() error {
		if stopped {
			return nil
		}
		stopped = true
		cancel()
		err := <-done
		a.Close()
		return err
	}, nil
}

// produce writes n committed events in transactions of 10, rolling back one
// transaction in 20 (those events must never arrive).
func produce(ctx context.Context, pool *pgxpool.Pool, schema string, p, n, keys int, committed, rolledBack *atomic.Int64) error {
	q := "INSERT INTO " + schema + ".outbox (aggregate_id, aggregate_type, event_type, payload) VALUES ($1, 'order', $2, $3)"
	seq := 0
	for written := 0; written < n; {
		rollback := rand.N(20) == 0
		size := min(10, n-written)
		tx, err := pool.Begin(ctx)
		if err != nil {
			return fmt.Errorf("producer %d: %w", p, err)
		}
		b := &pgx.Batch{}
		for range size {
			seq++
			key := fmt.Sprintf("order-%d", rand.N(keys))
			payload := fmt.Sprintf(`{"producer": %d, "seq": %d, "rollback": %t, "note": "demo event"}`, p, seq, rollback)
			b.Queue(q, key, eventTypes[rand.N(len(eventTypes))], payload)
		}
		if err := tx.SendBatch(ctx, b).Close(); err != nil {
			_ = tx.Rollback(ctx)
			return fmt.Errorf("producer %d: %w", p, err)
		}
		if rollback {
			_ = tx.Rollback(ctx)
			rolledBack.Add(int64(size))
			continue
		}
		if err := tx.Commit(ctx); err != nil {
			return fmt.Errorf("producer %d: %w", p, err)
		}
		committed.Add(int64(size))
		written += size
	}
	return nil
}

// consumer reads the demo topics and checks per-key order by the producers'
// sequence numbers.
type consumer struct {
	cl       *kgo.Client
	mu       sync.Mutex
	seen     map[string]int // event id -> times received
	lastSeq  map[string][2]int
	dups     int
	disorder int
	rolled   int
	sample   *kgo.Record
}

func newConsumer(brokers, topics []string) *consumer {
	cl, _ := kgo.NewClient(kgo.SeedBrokers(brokers...), kgo.ConsumeTopics(topics...),
		kgo.ConsumeResetOffset(kgo.NewOffset().AtStart()))
	return &consumer{cl: cl, seen: map[string]int{}, lastSeq: map[string][2]int{}}
}

func (c *consumer) close() { c.cl.Close() }

func (c *consumer) run(ctx context.Context) {
	for ctx.Err() == nil {
		fs := c.cl.PollFetches(ctx)
		fs.EachRecord(c.record)
	}
}
