package e2e

import (
	"context"
	"fmt"
	"io"
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
	"github.com/twmb/franz-go/pkg/kmsg"

	"github.com/outbox-relay/outbox-relay/internal/config"
	"github.com/outbox-relay/outbox-relay/internal/layout"
	eventledger "github.com/outbox-relay/outbox-relay/internal/ledger"
	"github.com/outbox-relay/outbox-relay/internal/pgtest"
	"github.com/outbox-relay/outbox-relay/internal/sink/rabbitmq"
	"github.com/outbox-relay/outbox-relay/internal/sink/sinktest"
)

// chaosTable is the outbox of the fault scenarios: ids in insert order, a
// key, a topic, a published flag.
const chaosTable = `CREATE TABLE outbox (
  id BIGSERIAL PRIMARY KEY, k TEXT NOT NULL, topic TEXT NOT NULL, payload JSONB NOT NULL,
  created_at TIMESTAMPTZ NOT NULL DEFAULT clock_timestamp(),
  published BOOLEAN NOT NULL DEFAULT false, published_at TIMESTAMPTZ)`

// chaosSource relays chaosTable.
func chaosSource(batch, pipeline int) config.Source {
	return config.Source{Name: "chaos", Table: "public.outbox", BatchSize: batch, Pipeline: pipeline,
		Layout: layout.Spec{ID: "id", Payload: "payload", Topic: "{topic}", Key: "{k}", CreatedAt: "created_at", OrderBy: "id",
			State: layout.State{Mode: "flag", Flag: "published", PublishedAt: []string{"published_at"}}}}
}

// chaosBacklog is a new database whose chaosTable holds rows committed
// rows over keys k0..k99 for topic orders, recorded in a new ledger.
func chaosBacklog(t *testing.T, rows int) (string, *pgxpool.Pool, *eventledger.Ledger) {
	t.Helper()
	dsn, pool := pgtest.NewDB(t)
	pgtest.Exec(t, pool, chaosTable)
	l := eventledger.New()
	fillChaos(t, pool, l, "orders", "k", rows, 100, 0)
	return dsn, pool, l
}

// fillChaos commits rows over keys prefix0..prefix<keys-1> (one statement
// per 500 rows) to topic and records them in the ledger.
func fillChaos(t *testing.T, pool *pgxpool.Pool, l *eventledger.Ledger, topic, prefix string, rows, keys, from int) {
	t.Helper()
	ctx := context.Background()
	for start := 0; start < rows; start += 500 {
		n := min(500, rows-start)
		r, err := pool.Query(ctx, `INSERT INTO outbox (k, topic, payload)
SELECT $6::text || ((($3::int + i) % $4::int)::text), $1, jsonb_build_object('n', $3::int + i)
FROM generate_series($2::int, $2::int + $5::int - 1) i ORDER BY i RETURNING id::text, k`, topic, start, from, keys, n, prefix)
		if err != nil {
			t.Fatal(err)
		}
		for r.Next() {
			var id, k string
			if err := r.Scan(&id, &k); err != nil {
				t.Fatal(err)
			}
			l.Commit(id, k)
		}
		if r.Err() != nil {
			t.Fatal(r.Err())
		}
	}
}

// asDrainProgresses calls fault(i) n times while rows drain, each once
// published() has passed i/(n+1) of rows.
func asDrainProgresses(t *testing.T, rows, n int, published func() int, what string, fault func(i int)) {
	t.Helper()
	for i := 1; i <= n; i++ {
		target := rows * i / (n + 1)
		waitFor(t, 60*time.Second, fmt.Sprintf("rows flowing before %s %d", what, i), func() (bool, string) {
			got := published()
			return got >= target, fmt.Sprintf("%d of %d published", got, target)
		})
		fault(i)
	}
}

// countPublished counts chaosTable's published rows.
func countPublished(pool *pgxpool.Pool) func() int {
	return func() int {
		var n int
		_ = pool.QueryRow(context.Background(), "SELECT count(*) FROM outbox WHERE published").Scan(&n)
		return n
	}
}

// settle waits until no row is pending and every committed event has been
// delivered, then feeds the deliveries to the ledger and checks it.
func settle(t *testing.T, pool *pgxpool.Pool, l *eventledger.Ledger, col *collector, committed int, timeout time.Duration) eventledger.Report {
	t.Helper()
	waitFor(t, timeout, "every row delivered and marked", func() (bool, string) {
		var pending int
		if err := pool.QueryRow(context.Background(), "SELECT count(*) FROM outbox WHERE NOT published").Scan(&pending); err != nil {
			return false, err.Error()
		}
		got := len(distinct(col.records()))
		return pending == 0 && got >= committed, fmt.Sprintf("%d pending, %d of %d delivered", pending, got, committed)
	})
	for _, r := range col.records() {
		id, _ := header(r, "event_id")
		l.Deliver(id)
	}
	var dead int
	if err := pool.QueryRow(context.Background(), "SELECT count(*) FROM outbox_relay.failed_events").Scan(&dead); err != nil {
		t.Fatal(err)
	}
	if dead != 0 {
		t.Errorf("%d rows were dead-lettered; none should be", dead)
	}
	return l.Check(nil)
}

// TestChaosAmbiguousAcks guards the Kafka sink's idempotent producer: the
// broker writes a batch and then answers with an error (REQUEST_TIMED_OUT,
// NOT_ENOUGH_REPLICAS_AFTER_APPEND), the client sends it again, and the
// broker recognises the retry by its producer sequence: nothing is lost and
// nothing arrives twice.
func TestChaosAmbiguousAcks(t *testing.T) {
	t.Parallel()
	rows, faults := 3000, 20
	if chaosFull() {
		rows, faults = 30000, 200
	}
	dsn, pool, l := chaosBacklog(t, rows)
	c := kafkaCluster(t, kfake.SeedTopics(4, "orders"))
	// Every fifth produce request is applied, then answered with an error.
	var n int
	fault := c.Fault(kfake.Fault{Keys: []kmsg.Key{kmsg.Produce}, Topic: "orders", Err: kerr.RequestTimedOut, Count: faults,
		When: func(kmsg.Request) bool { n++; return n%5 == 0 }})
	col := collect(t, c.ListenAddrs(), "orders")
	runRelay(t, baseConfig(dsn, c.ListenAddrs(), chaosSource(100, 4)))
	rep := settle(t, pool, l, col, rows, 90*time.Second)
	t.Logf("%d rows, %d produce requests answered with an error after being applied: %s", rows, fault.Hits(), rep)
	if fault.Hits() == 0 {
		t.Fatal("no ambiguous answer was given: the scenario proves nothing")
	}
	if !rep.OK() || rep.Duplicates != 0 {
		t.Error(rep)
	}
}

// TestChaosBrokerRestart guards delivery across a broker that goes away
// and comes back with its data (kfake persisting to a directory, restarted
// on the same port): the relay's calls fail meanwhile, rows stay pending,
// charged no attempt (the cluster is down, not the messages at fault), and
// are delivered once the broker is back; nothing is lost, order holds
// (duplicates of records the broker wrote but whose answer was lost are
// allowed, and counted).
func TestChaosBrokerRestart(t *testing.T) {
	t.Parallel()
	brokerRestartChaos(t, config.DeliveryAtLeastOnce)
}

// TestChaosExactlyOnceBrokerRestart is the same with delivery
// exactly_once: transactions open when the broker goes are aborted or
// settled by the takeover; a read_committed consumer sees no duplicate.
func TestChaosExactlyOnceBrokerRestart(t *testing.T) {
	t.Parallel()
	brokerRestartChaos(t, config.DeliveryExactlyOnce)
}

func brokerRestartChaos(t *testing.T, delivery string) {
	t.Helper()
	rows, restarts := 4000, 2
	if chaosFull() {
		rows, restarts = 40000, 6
	}
	dsn, pool := pgtest.NewDB(t)
	pgtest.Exec(t, pool, chaosTable)
	l := eventledger.New()
	dir := t.TempDir()
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	port := ln.Addr().(*net.TCPAddr).Port
	_ = ln.Close()
	start := func() *kfake.Cluster {
		t.Helper()
		var c *kfake.Cluster
		waitFor(t, 20*time.Second, "the broker to start on its port", func() (bool, string) {
			var err error
			c, err = kfake.NewCluster(kfake.NumBrokers(1), kfake.Ports(port), kfake.DataDir(dir), kfake.SeedTopics(4, "orders"),
				kfake.SeedTopics(1, config.DefaultProgressTopic))
			return err == nil, fmt.Sprint(err)
		})
		return c
	}
	c := start()
	brokers := c.ListenAddrs()
	fillChaos(t, pool, l, "orders", "k", rows, 100, 0)
	src := chaosSource(100, 2)
	src.Delivery = delivery
	cfg := baseConfig(dsn, brokers, src)
	s := cfg.Sinks["kafka"]
	// The records time out (2 s) before the call passes its deadline: the
	// sink reports the cluster down, not the circuit.
	s.Timeout, s.DeliveryTimeout = config.Duration(10*time.Second), config.Duration(2*time.Second)
	cfg.Sinks["kafka"] = s
	a, _ := runApp(t, cfg)
	published := countPublished(pool)
	asDrainProgresses(t, rows, restarts, published, "restart", func(i int) {
		c.Close()
		before := published()
		// Down long enough for records to time out: the relay must see
		// the failures and keep the rows for later, charging none of them
		// an attempt (the broker is down, not the messages at fault).
		held := gathered(t, a, "outbox_relay_events_deferred_total", "source", "chaos")
		claims, since := gathered(t, a, "outbox_relay_claim_batches_total", "source", "chaos"), time.Now()
		waitFor(t, 60*time.Second, "the relay to hold rows while the broker is down", func() (bool, string) {
			n := gathered(t, a, "outbox_relay_events_deferred_total", "source", "chaos")
			if delivery == config.DeliveryExactlyOnce {
				// Or to stop claiming: a transaction without an answer
				// stops the source until its takeover reaches the broker
				// (no claim for a second).
				if c := gathered(t, a, "outbox_relay_claim_batches_total", "source", "chaos"); c != claims {
					claims, since = c, time.Now()
				}
				return n > held || time.Since(since) > time.Second, fmt.Sprintf("%v held, %v claims", n, claims)
			}
			return n > held, fmt.Sprintf("%v held", n)
		})
		if _, charged := deadAndCharged(t, pool); charged != 0 {
			t.Errorf("restart %d: %d rows charged an attempt while the broker was down; want none", i, charged)
		}
		c = start()
		t.Logf("restart %d: broker closed and started again with %d rows published", i, before)
	})
	defer c.Close()
	// Read everything back from the restarted broker: what it kept.
	col := collect(t, brokers, "orders")
	if delivery == config.DeliveryExactlyOnce {
		col = collectCommitted(t, brokers, "orders")
	}
	rep := settle(t, pool, l, col, rows, 90*time.Second)
	t.Logf("%s, %d rows over %d broker restarts: %s", delivery, rows, restarts, rep)
	if !rep.OK() || (delivery == config.DeliveryExactlyOnce && rep.Duplicates > 0) {
		t.Error(rep)
	}
}

// TestChaosDatabaseCut guards the claim and completion transactions: the
// connection to PostgreSQL is cut again and again while a backlog drains
// (a TCP proxy closes every connection and refuses new ones for a moment),
// hitting claims, publishes and commits. A cut claim's rows are pending
// again; a cut commit is rolled back and its batch published again:
// nothing is lost and order holds on first delivery.
func TestChaosDatabaseCut(t *testing.T) {
	t.Parallel()
	rows, cuts := 4000, 8
	if chaosFull() {
		rows, cuts = 40000, 60
	}
	dsn, pool, l := chaosBacklog(t, rows)
	host := strings.TrimPrefix(strings.SplitN(strings.SplitN(dsn, "@", 2)[1], "/", 2)[0], "")
	proxy := sinktest.NewProxy(t, host)
	c := kafkaCluster(t, kfake.SeedTopics(4, "orders"))
	col := collect(t, c.ListenAddrs(), "orders")
	cfg := baseConfig(strings.Replace(dsn, "@"+host+"/", "@"+proxy.Addr()+"/", 1), c.ListenAddrs(), chaosSource(50, 3))
	cfg.LeaseTTL = config.Duration(2 * time.Second)
	runRelay(t, cfg)
	asDrainProgresses(t, rows, cuts, countPublished(pool), "cut", func(int) { proxy.Cut(200 * time.Millisecond) })
	rep := settle(t, pool, l, col, rows, 90*time.Second)
	t.Logf("%d rows, %d connection cuts: %s", rows, cuts, rep)
	if !rep.OK() {
		t.Error(rep)
	}
}

// blackHole forwards TCP to upstream until swallow is called: from then on
// it reads what either side sends and holds it, answering nothing and
// closing nothing, until release, which forwards what it held and goes on.
// While slamming, it closes every new connection at once instead (a server
// that is down) and counts them.
type blackHole struct {
	ln       net.Listener
	upstream string
	mu       sync.Mutex
	holding  bool
	released chan struct{}
	slamming atomic.Bool
	slammed  atomic.Int64
}

func newBlackHole(t *testing.T, upstream string) *blackHole {
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	b := &blackHole{ln: ln, upstream: upstream, released: make(chan struct{})}
	t.Cleanup(func() { b.release(); _ = ln.Close() })
	go func() {
		for {
			cl, err := ln.Accept()
			if err != nil {
				return
			}
			if b.slamming.Load() {
				_ = cl.Close()
				b.slammed.Add(1)
				continue
			}
			sv, err := net.Dial("tcp", upstream)
			if err != nil {
				_ = cl.Close()
				continue
			}
			go b.pipe(sv, cl)
			go b.pipe(cl, sv)
		}
	}()
	return b
}

func (b *blackHole) addr() string { return b.ln.Addr().String() }

func (b *blackHole) swallow() {
	b.mu.Lock()
	b.holding, b.released = true, make(chan struct{})
	b.mu.Unlock()
}

func (b *blackHole) release() {
	b.mu.Lock()
	if b.holding {
		b.holding = false
		close(b.released)
	}
	b.mu.Unlock()
}

func (b *blackHole) pipe(dst, src net.Conn) {
	defer func() { _ = dst.Close(); _ = src.Close() }()
	buf := make([]byte, 32<<10)
	for {
		n, err := src.Read(buf)
		if n > 0 {
			b.mu.Lock()
			holding, released := b.holding, b.released
			b.mu.Unlock()
			if holding {
				<-released
			}
			if _, werr := dst.Write(buf[:n]); werr != nil {
				return
			}
		}
		if err != nil {
			if err != io.EOF {
				return
			}
			return
		}
	}
}

// TestChaosBlackHoledSink guards the per-sink deadline and circuit breaker:
// a RabbitMQ connection that holds every byte (no reset, no answer) while
// events flow to Kafka and RabbitMQ from one source. Kafka's events keep
// arriving within a second (p99) meanwhile; RabbitMQ's wait, not
// dead-lettered nor charged, and arrive in key order once the connection
// passes bytes again.
func TestChaosBlackHoledSink(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	seconds := 4
	if chaosFull() {
		seconds = 30
	}
	dsn, pool := pgtest.NewDB(t)
	pgtest.Exec(t, pool, chaosTable)
	rabbit := newRabbitQueue(t, "bh")
	hole := newBlackHole(t, strings.TrimSuffix(strings.TrimPrefix(rabbit.url, "amqp://guest:guest@"), "/"))
	c := kafkaCluster(t, kfake.SeedTopics(4, "orders"))
	cfg := baseConfig(dsn, c.ListenAddrs(), chaosSource(50, 2))
	cfg.Sinks["rabbit"] = config.Sink{Type: "rabbitmq", Timeout: config.Duration(500 * time.Millisecond),
		Circuit: config.Circuit{Cooldown: config.Duration(200 * time.Millisecond), MaxCooldown: config.Duration(time.Second)},
		Blocks:  config.Blocks{"rabbitmq": &rabbitmq.Config{URL: "amqp://guest:guest@" + hole.addr() + "/", Exchange: rabbit.exchange}}}
	cfg.Sources[0].Routes = []config.Route{{Name: "rabbit", Column: "topic", Values: []string{"bh.events"}, Sink: "rabbit"}}
	cfg.ApplyDefaults()
	col := collect(t, c.ListenAddrs(), "orders")
	l := eventledger.New()
	a, _ := runApp(t, cfg)
	// The connection works first (the sink connects), then holds bytes.
	fillChaos(t, pool, l, "bh.events", "r", 10, 5, 0)
	waitFor(t, 20*time.Second, "RabbitMQ working before the black hole", func() (bool, string) {
		rabbit.mu.Lock()
		defer rabbit.mu.Unlock()
		return len(rabbit.got) >= 10, fmt.Sprint(len(rabbit.got))
	})
	hole.swallow()
	// Events to both for a while: each Kafka event's latency is its
	// arrival minus its insert.
	inserted := map[string]time.Time{}
	deadline := time.Now().Add(time.Duration(seconds) * time.Second)
	kafkaRows, rabbitRows := 0, 10
	for i := 0; time.Now().Before(deadline); i++ {
		topic, keys := "orders", 20
		if i%4 == 3 {
			topic, keys = "bh.events", 5
		}
		var id, k string
		var at time.Time
		if err := pool.QueryRow(ctx, `INSERT INTO outbox (k, topic, payload) VALUES ($1 || ($2::int % $3::int)::text, $4, jsonb_build_object('n', $2::int))
RETURNING id::text, k, created_at`, map[string]string{"orders": "k", "bh.events": "r"}[topic], i, keys, topic).Scan(&id, &k, &at); err != nil {
			t.Fatal(err)
		}
		l.Commit(id, k)
		if topic == "orders" {
			inserted[id] = at
			kafkaRows++
		} else {
			rabbitRows++
		}
		time.Sleep(5 * time.Millisecond) // a producer's pace, not a synchronisation
	}
	waitFor(t, 20*time.Second, "every Kafka event while RabbitMQ is black-holed", func() (bool, string) {
		n := 0
		for id := range distinct(col.records()) {
			if _, ok := inserted[id]; ok {
				n++
			}
		}
		return n == kafkaRows, fmt.Sprintf("%d of %d", n, kafkaRows)
	})
	if s := circuitState(t, a, "rabbit"); s == 0 {
		t.Error("the black-holed sink's circuit is closed")
	}
	var lat []time.Duration
	for id, r := range distinct(col.records()) {
		if at, ok := inserted[id]; ok {
			lat = append(lat, r.Timestamp.Sub(at))
		}
	}
	slices.Sort(lat)
	p := func(q float64) time.Duration { return lat[min(len(lat)-1, int(q*float64(len(lat))))] }
	t.Logf("black hole for %ds: %d Kafka events, latency p50 %v p99 %v max %v; %d RabbitMQ events waiting",
		seconds, len(lat), p(0.5).Round(time.Millisecond), p(0.99).Round(time.Millisecond), lat[len(lat)-1].Round(time.Millisecond), rabbitRows-10)
	if p(0.99) > time.Second {
		t.Errorf("Kafka p99 %v while RabbitMQ is black-holed, want under 1s", p(0.99))
	}
	dead, charged := deadAndCharged(t, pool)
	if dead != 0 || charged != 0 {
		t.Errorf("while RabbitMQ was black-holed: %d dead letters, %d rows charged an attempt; want none: %s", dead, charged, whyCharged(pool))
	}
	hole.release()
	waitFor(t, 60*time.Second, "RabbitMQ's events once the connection passes bytes", func() (bool, string) {
		var pending int
		_ = pool.QueryRow(ctx, "SELECT count(*) FROM outbox WHERE NOT published").Scan(&pending)
		return pending == 0, fmt.Sprint(pending, " pending")
	})
	rabbit.mu.Lock()
	for _, d := range rabbit.got {
		l.Deliver(d.id)
	}
	rabbit.mu.Unlock()
	for _, r := range col.records() {
		id, _ := header(r, "event_id")
		l.Deliver(id)
	}
	rep := l.Check(nil)
	t.Logf("after the black hole: %s", rep)
	if !rep.OK() {
		t.Error(rep)
	}
}
