package e2e

import (
	"context"
	"fmt"
	"net"
	"slices"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/jackc/pgx/v5/pgxpool"
	"github.com/twmb/franz-go/pkg/kerr"
	"github.com/twmb/franz-go/pkg/kfake"
	"github.com/twmb/franz-go/pkg/kgo"
	"github.com/twmb/franz-go/pkg/kmsg"

	"github.com/outbox-relay/outbox-relay/internal/config"
	eventledger "github.com/outbox-relay/outbox-relay/internal/ledger"
	"github.com/outbox-relay/outbox-relay/internal/pgtest"
	"github.com/outbox-relay/outbox-relay/internal/sink/nats"
	"github.com/outbox-relay/outbox-relay/internal/sink/sinkconf"
)

// These scenarios complement those of chaos_faults_test.go (broker
// restart, ambiguous acks, a black-holed RabbitMQ) where those leave a
// gap: a broker restarted under a steady inflow and brought back quickly,
// both ambiguous produce answers spread over the drain and over single
// partitions, and a black-holed NATS sink with Kafka's latency taken at
// the consumer.

// steadyInserts commits a row to topic every pace, over keys
// prefix0..prefix<keys-1>, recording each in l, until stop is called;
// stop returns how many rows it committed. Errors fail the test.
func steadyInserts(t *testing.T, pool *pgxpool.Pool, l *eventledger.Ledger, topic, prefix string, keys, from int,
	pace time.Duration) (stop func() int) {
	t.Helper()
	// Stopping is seen between inserts only: an insert cancelled midway
	// may still commit, and would be missing from the ledger.
	var stopping atomic.Bool
	var n atomic.Int64
	done := make(chan struct{})
	go func() {
		defer close(done)
		for i := from; !stopping.Load(); i++ {
			var id, k string
			if err := pool.QueryRow(context.Background(), `INSERT INTO outbox (k, topic, payload)
VALUES ($1 || ($2::int % $3::int)::text, $4, jsonb_build_object('n', $2::int)) RETURNING id::text, k`,
				prefix, i, keys, topic).Scan(&id, &k); err != nil {
				t.Errorf("insert: %v", err)
				return
			}
			l.Commit(id, k)
			n.Add(1)
			time.Sleep(pace) // a producer's pace, not a synchronisation
		}
	}()
	var once sync.Once
	stop = func() int {
		once.Do(func() { stopping.Store(true); <-done })
		return int(n.Load())
	}
	t.Cleanup(func() { stop() })
	return stop
}

// settleReport waits until no row is pending, gives the consumer a while
// to read every committed event, and checks the ledger with what it read:
// a row marked published that never arrived shows as lost. Dead letters
// fail the test.
func settleReport(t *testing.T, pool *pgxpool.Pool, l *eventledger.Ledger, col *collector, committed int) eventledger.Report {
	t.Helper()
	ctx := context.Background()
	waitFor(t, 120*time.Second, "every row marked", func() (bool, string) {
		var pending int
		if err := pool.QueryRow(ctx, "SELECT count(*) FROM outbox WHERE NOT published").Scan(&pending); err != nil {
			return false, err.Error()
		}
		return pending == 0, fmt.Sprint(pending, " pending")
	})
	for until := time.Now().Add(20 * time.Second); len(distinct(col.records())) < committed && time.Now().Before(until); {
		time.Sleep(20 * time.Millisecond) // polling, as waitFor does
	}
	for _, r := range col.records() {
		id, _ := header(r, "event_id")
		l.Deliver(id)
	}
	var dead int
	if err := pool.QueryRow(ctx, "SELECT count(*) FROM outbox_relay.failed_events").Scan(&dead); err != nil {
		t.Fatal(err)
	}
	if dead != 0 {
		t.Errorf("%d rows were dead-lettered; none should be", dead)
	}
	return l.Check(nil)
}

// freePort is a local TCP port nothing listens on right now.
func freePort(t *testing.T) int {
	t.Helper()
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	defer ln.Close()
	return ln.Addr().(*net.TCPAddr).Port
}

// TestChaosBrokerRestartUnderLoad guards the Kafka sink's reconnection and
// the relay's retry of failed publishes across a broker that persists its
// log and producer state (kfake with a data directory) and is closed and
// started again on the same port while a backlog drains and rows keep
// coming. Every other time the broker is back within the sink's delivery
// timeout, so records caught in flight are retried by the client itself;
// the other times it stays away until the relay has seen publishes fail
// and scheduled their rows again. A restart is made only once rows have
// reached the broker started before it. Everything is read back from the last broker: the records of every
// incarnation are there, nothing is lost, each key's first deliveries are
// in order, nothing is dead-lettered; duplicates are counted.
func TestChaosBrokerRestartUnderLoad(t *testing.T) {
	t.Parallel()
	backlog, restarts, keys := 2000, 3, 100
	if chaosFull() {
		backlog, restarts, keys = 20000, 12, 1000
	}
	dsn, pool := pgtest.NewDB(t)
	pgtest.Exec(t, pool, chaosTable)
	l := eventledger.New()
	dir, port := t.TempDir(), freePort(t)
	var mu sync.Mutex
	var c *kfake.Cluster
	start := func() {
		t.Helper()
		waitFor(t, 20*time.Second, "the broker to start on its port", func() (bool, string) {
			nc, err := kfake.NewCluster(kfake.NumBrokers(1), kfake.Ports(port), kfake.DataDir(dir), kfake.SeedTopics(4, "orders"))
			if err != nil {
				return false, err.Error()
			}
			mu.Lock()
			c = nc
			mu.Unlock()
			return true, ""
		})
	}
	t.Cleanup(func() {
		mu.Lock()
		defer mu.Unlock()
		if c != nil {
			c.Close()
		}
	})
	start()
	brokers := []string{fmt.Sprintf("127.0.0.1:%d", port)}
	fillChaos(t, pool, l, "orders", "k", backlog, keys, 0)
	// Small batches, so that the backlog is still draining across the
	// restarts.
	cfg := baseConfig(dsn, brokers, chaosSource(20, 2))
	s := cfg.Sinks["kafka"]
	s.Timeout, s.DeliveryTimeout = config.Duration(3*time.Second), config.Duration(2*time.Second)
	cfg.Sinks["kafka"] = s
	a, _ := runApp(t, cfg)
	live := collect(t, brokers, "orders")
	stopInserts := steadyInserts(t, pool, l, "orders", "k", keys, backlog, 3*time.Millisecond)
	published := countPublished(pool)
	delivered := func() int { return len(distinct(live.records())) }
	var before []int
	for i := 1; i <= restarts; i++ {
		// Rows reach the broker started last (or the first) before it
		// goes: the relay and the consumer are connected to it.
		from := delivered()
		waitFor(t, 60*time.Second, fmt.Sprintf("rows delivered before restart %d", i), func() (bool, string) {
			n := delivered()
			return n >= from+100, fmt.Sprintf("%d delivered, %d before", n, from)
		})
		before = append(before, published())
		retried := gathered(t, a, "outbox_relay_events_retried_total", "source", "chaos")
		mu.Lock()
		c.Close()
		mu.Unlock()
		if i%2 == 1 {
			// Back within the delivery timeout: the client retries.
			time.Sleep(300 * time.Millisecond) // the fault's length, not a synchronisation
		} else {
			// Away until publishes fail: the relay keeps the rows
			// and retries them.
			waitFor(t, 30*time.Second, fmt.Sprintf("the relay to retry rows while the broker is down (restart %d)", i),
				func() (bool, string) {
					n := gathered(t, a, "outbox_relay_events_retried_total", "source", "chaos")
					return n > retried, fmt.Sprintf("%.0f retried, %.0f before", n, retried)
				})
		}
		start()
	}
	from := delivered()
	waitFor(t, 60*time.Second, "rows delivered after the last restart", func() (bool, string) {
		n := delivered()
		return n >= from+100, fmt.Sprintf("%d delivered, %d before", n, from)
	})
	committed := backlog + stopInserts()
	// Read everything back from the last broker: what it kept of every
	// incarnation.
	back := collect(t, brokers, "orders")
	rep := settleReport(t, pool, l, back, committed)
	var missing int
	kept := distinct(back.records())
	for id := range distinct(live.records()) {
		if _, ok := kept[id]; !ok {
			missing++
		}
	}
	retried := gathered(t, a, "outbox_relay_events_retried_total", "source", "chaos")
	t.Logf("%d rows (%d backlog), %d broker restarts (odd ones back within the delivery timeout, even ones once publishes failed) with %v rows published before each, %.0f rows retried by the relay: %s",
		committed, backlog, restarts, before, retried, rep)
	if !rep.OK() {
		t.Error(rep)
	}
	if missing > 0 {
		t.Errorf("%d events a consumer read before a restart are not on the restarted broker", missing)
	}
	if before[0] >= committed {
		t.Errorf("the first restart came after the drain (%d of %d published): the scenario proves nothing", before[0], committed)
	}
}

// TestChaosAmbiguousAcksSpread guards the Kafka sink's idempotent producer
// against both answers a broker can give after it has written a batch,
// REQUEST_TIMED_OUT and NOT_ENOUGH_REPLICAS_AFTER_APPEND, in waves spread
// over the drain of a backlog (and a steady inflow after it), some failing
// a whole produce request and some a single partition of it: the client
// sends the batch again and the broker recognises it by its producer
// sequence, so nothing is lost and nothing arrives twice (no duplicate at
// all), each key in order, nothing dead-lettered.
func TestChaosAmbiguousAcksSpread(t *testing.T) {
	t.Parallel()
	rows, waves, per, keys := 3000, 6, 3, 200
	if chaosFull() {
		rows, waves, per, keys = 30000, 40, 5, 1000
	}
	dsn, pool := pgtest.NewDB(t)
	pgtest.Exec(t, pool, chaosTable)
	l := eventledger.New()
	fillChaos(t, pool, l, "orders", "k", rows, keys, 0)
	c := kafkaCluster(t, kfake.SeedTopics(4, "orders"))
	col := collect(t, c.ListenAddrs(), "orders")
	runRelay(t, baseConfig(dsn, c.ListenAddrs(), chaosSource(50, 4)))
	// Rows keep coming, so that every wave finds produce requests to
	// answer even once the backlog is gone.
	stopInserts := steadyInserts(t, pool, l, "orders", "k", keys, rows, 5*time.Millisecond)
	codes := []*kerr.Error{kerr.RequestTimedOut, kerr.NotEnoughReplicasAfterAppend}
	hits, whole, single := 0, 0, 0
	asDrainProgresses(t, rows, waves, countPublished(pool), "ambiguous answers", func(i int) {
		f := kfake.Fault{Keys: []kmsg.Key{kmsg.Produce}, Topic: "orders", Err: codes[i%2], Count: per}
		if i%3 == 0 {
			f.Partitions = []int32{int32(i % 4)} // one partition of the request; the others succeed
			single++
		} else {
			whole++
		}
		h := c.Fault(f)
		ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
		defer cancel()
		if err := h.Wait(ctx, per); err != nil {
			t.Fatalf("wave %d: %d of %d ambiguous answers given: %v", i, h.Hits(), per, err)
		}
		hits += h.Hits()
	})
	committed := rows + stopInserts()
	rep := settle(t, pool, l, col, committed, 90*time.Second)
	t.Logf("%d rows (%d backlog), %d waves of %d ambiguous answers (%d given; %d waves on whole requests, %d on one partition; %s and %s alternating): %s",
		committed, rows, waves, per, hits, whole, single, codes[0].Message, codes[1].Message, rep)
	if !rep.OK() || rep.Duplicates != 0 {
		t.Error(rep)
	}
}

// timedCollector consumes topics from the start and notes when each event
// first arrived.
type timedCollector struct {
	mu    sync.Mutex
	first map[string]time.Time
	ids   []string // every arrival's event id, in arrival order
}

func collectTimed(t *testing.T, brokers []string, topics ...string) *timedCollector {
	t.Helper()
	cl, err := kgo.NewClient(kgo.SeedBrokers(brokers...), kgo.ConsumeTopics(topics...),
		kgo.ConsumeResetOffset(kgo.NewOffset().AtStart()), kgo.MetadataMinAge(50*time.Millisecond),
		kgo.FetchMaxWait(100*time.Millisecond))
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithCancel(context.Background())
	c := &timedCollector{first: map[string]time.Time{}}
	done := make(chan struct{})
	go func() {
		defer close(done)
		for ctx.Err() == nil {
			fs := cl.PollFetches(ctx)
			now := time.Now()
			c.mu.Lock()
			fs.EachRecord(func(r *kgo.Record) {
				id, _ := header(r, "event_id")
				c.ids = append(c.ids, id)
				if _, ok := c.first[id]; !ok {
					c.first[id] = now
				}
			})
			c.mu.Unlock()
		}
	}()
	t.Cleanup(func() { cancel(); <-done; cl.Close() })
	return c
}

func (c *timedCollector) arrived(id string) (time.Time, bool) {
	c.mu.Lock()
	defer c.mu.Unlock()
	at, ok := c.first[id]
	return at, ok
}

func (c *timedCollector) arrivals() []string {
	c.mu.Lock()
	defer c.mu.Unlock()
	return slices.Clone(c.ids)
}

// TestChaosBlackHoledSinkNATS guards the per-sink deadline and circuit
// breaker (internal/sink/breaker, wrapped around every sink in
// internal/app) with a NATS JetStream sink beside Kafka on one source: the
// NATS connection goes through a proxy that, once the sink is connected,
// holds every byte both ways without closing anything. Rows to both keep
// coming; each Kafka event's latency, from its row's commit to its arrival
// at a Kafka consumer, stays under a second at p99, and NATS's circuit
// opens. NATS's rows are neither dead-lettered nor charged an attempt; once
// the proxy passes bytes again they arrive, each key in order.
func TestChaosBlackHoledSinkNATS(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	hold := 4 * time.Second
	if chaosFull() {
		hold = 30 * time.Second
	}
	dsn, pool := pgtest.NewDB(t)
	pgtest.Exec(t, pool, chaosTable)
	stream := newNATSStream(t)
	hole := newBlackHole(t, strings.TrimPrefix(stream.url, "nats://"))
	c := kafkaCluster(t, kfake.SeedTopics(4, "orders"))
	cfg := baseConfig(dsn, c.ListenAddrs(), chaosSource(50, 2))
	cfg.Sinks["bus"] = config.Sink{Type: "nats", Timeout: config.Duration(300 * time.Millisecond),
		Circuit: config.Circuit{Cooldown: config.Duration(200 * time.Millisecond), MaxCooldown: config.Duration(time.Second)},
		Blocks:  config.Blocks{"nats": &nats.Config{URL: "nats://" + hole.addr(), AckTimeout: sinkconf.Duration(10 * time.Second)}}}
	cfg.Sources[0].Routes = []config.Route{{Name: "bus", Column: "topic", Values: []string{"bus"}, Sink: "bus",
		Topic: stream.prefix + ".events"}}
	cfg.ApplyDefaults()
	kl, nl := eventledger.New(), eventledger.New() // Kafka's events, NATS's
	timed := collectTimed(t, c.ListenAddrs(), "orders")
	a, _ := runApp(t, cfg)

	// The sink connects and works through the proxy first.
	fillChaos(t, pool, nl, "bus", "n", 10, 5, 0)
	waitFor(t, 20*time.Second, "NATS working before the black hole", func() (bool, string) {
		n := len(stream.read(t))
		return n >= 10, fmt.Sprint(n, " of 10")
	})
	hole.swallow()
	stored := len(stream.read(t))

	// Rows to both for a while, one in four to NATS, each Kafka row's
	// commit time noted.
	inserted := map[string]time.Time{}
	natsRows, busKeys := 10, 5
	deadline := time.Now().Add(hold)
	for i := 0; time.Now().Before(deadline); i++ {
		topic, prefix, keys, l := "orders", "k", 40, kl
		if i%4 == 3 {
			topic, prefix, keys, l = "bus", "n", busKeys, nl
		}
		var id, k string
		if err := pool.QueryRow(ctx, `INSERT INTO outbox (k, topic, payload)
VALUES ($1 || ($2::int % $3::int)::text, $4, jsonb_build_object('n', $2::int)) RETURNING id::text, k`,
			prefix, i+10, keys, topic).Scan(&id, &k); err != nil {
			t.Fatal(err)
		}
		l.Commit(id, k)
		if topic == "orders" {
			inserted[id] = time.Now()
		} else {
			natsRows++
		}
		time.Sleep(5 * time.Millisecond) // a producer's pace, not a synchronisation
	}
	// Wait for every Kafka event, but not for ever: one still missing
	// counts as waiting since its commit, which the percentiles judge.
	arrivedAll := func() bool {
		for id := range inserted {
			if _, ok := timed.arrived(id); !ok {
				return false
			}
		}
		return true
	}
	for until := time.Now().Add(30 * time.Second); !arrivedAll() && time.Now().Before(until); {
		time.Sleep(20 * time.Millisecond) // polling, as waitFor does
	}
	state := circuitState(t, a, "bus")
	var lat []time.Duration
	missing := 0
	for id, at := range inserted {
		got, ok := timed.arrived(id)
		if !ok {
			missing++
			got = time.Now()
		}
		lat = append(lat, got.Sub(at))
	}
	slices.Sort(lat)
	q := func(f float64) time.Duration {
		return lat[min(len(lat)-1, int(f*float64(len(lat))))].Round(time.Millisecond)
	}
	dead, charged := deadAndCharged(t, pool)
	during := len(stream.read(t)) - stored
	t.Logf("NATS black-holed for %v: %d Kafka events (%d not arrived), latency p50 %v p99 %v max %v; %d NATS rows waiting, circuit state %v, %d stored meanwhile",
		hold, len(lat), missing, q(0.5), q(0.99), lat[len(lat)-1].Round(time.Millisecond), natsRows-10, state, during)
	if q(0.99) >= time.Second {
		t.Errorf("Kafka p99 %v while NATS is black-holed, want under 1s", q(0.99))
	}
	if missing > 0 {
		t.Fatalf("%d of %d Kafka events did not arrive within 30s while NATS was black-holed", missing, len(lat))
	}
	if state == 0 {
		t.Error("the black-holed sink's circuit is closed")
	}
	if during != 0 {
		t.Errorf("%d messages reached NATS through the black hole: the scenario proves nothing", during)
	}
	if dead != 0 || charged != 0 {
		t.Errorf("while NATS was black-holed: %d dead letters, %d rows charged an attempt; want none", dead, charged)
	}

	// The proxy passes bytes again: NATS's rows arrive, each key in order.
	hole.release()
	waitFor(t, 60*time.Second, "every row published once the proxy passes bytes", func() (bool, string) {
		var pending int
		if err := pool.QueryRow(ctx, "SELECT count(*) FROM outbox WHERE NOT published").Scan(&pending); err != nil {
			return false, err.Error()
		}
		return pending == 0, fmt.Sprint(pending, " pending")
	})
	var got []arrival
	waitFor(t, 20*time.Second, "every NATS event in the stream", func() (bool, string) {
		got = stream.read(t)
		ids := map[string]bool{}
		for _, a := range got {
			ids[a.id] = true
		}
		return len(ids) >= natsRows, fmt.Sprintf("%d of %d", len(ids), natsRows)
	})
	for _, a := range got {
		nl.Deliver(a.id)
	}
	for _, id := range timed.arrivals() {
		kl.Deliver(id)
	}
	nrep, krep := nl.Check(nil), kl.Check(nil)
	if err := pool.QueryRow(ctx, "SELECT count(*) FROM outbox_relay.failed_events").Scan(&dead); err != nil {
		t.Fatal(err)
	}
	t.Logf("NATS: %s; Kafka: %s; %d dead letters", nrep, krep, dead)
	if !nrep.OK() {
		t.Errorf("NATS: %s", nrep)
	}
	if !krep.OK() {
		t.Errorf("Kafka: %s", krep)
	}
	if dead != 0 {
		t.Errorf("%d rows were dead-lettered; none should be", dead)
	}
}
