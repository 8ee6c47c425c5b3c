package e2e

import (
	"context"
	"fmt"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/jackc/pgx/v5/pgxpool"
	"github.com/twmb/franz-go/pkg/kadm"
	"github.com/twmb/franz-go/pkg/kerr"
	"github.com/twmb/franz-go/pkg/kfake"
	"github.com/twmb/franz-go/pkg/kgo"
	"github.com/twmb/franz-go/pkg/kmsg"

	"github.com/outbox-relay/outbox-relay/internal/config"
	eventledger "github.com/outbox-relay/outbox-relay/internal/ledger"
	"github.com/outbox-relay/outbox-relay/internal/pgtest"
)

// exactlyOnceConfig writes the configuration of a relay process relaying
// chaosTable to brokers with delivery exactly_once.
func exactlyOnceConfig(t *testing.T, dsn string, brokers []string) string {
	t.Helper()
	return writeYAML(t, fmt.Sprintf(`log: {level: info, format: text}
admin: {listen: "off"}
shutdown: {timeout: 5s}
lease_ttl: 2s
databases:
  main: {dsn: %q}
sinks:
  kafka: {type: kafka, brokers: [%q]}
sources:
  - name: orders
    table: public.outbox
    delivery: exactly_once
    notify: "off"
    batch_size: 100
    poll: {min: 10ms, max: 100ms}
    layout: {id: id, payload: payload, topic: "{topic}", key: "{k}", created_at: created_at, order_by: id,
             state: {mode: flag, flag: published, published_at: [published_at]}}
`, dsn, strings.Join(brokers, ",")))
}

// committedByID counts, per event id, the records a read_committed
// consumer has seen.
func committedByID(c *collector) map[string]int {
	out := map[string]int{}
	for _, r := range c.records() {
		id, _ := header(r, "event_id")
		out[id]++
	}
	return out
}

func fillOrders(t *testing.T, pool *pgxpool.Pool, n int) {
	t.Helper()
	pgtest.Exec(t, pool, fmt.Sprintf(`INSERT INTO outbox (k, topic, payload)
SELECT 'k' || (g %% 7), 'orders', jsonb_build_object('i', g) FROM generate_series(1, %d) g`, n))
}

// TestExactlyOnceKillBetweenKafkaAndDatabase: the relay's Kafka transaction
// commits, its database commit cannot (a lock holds the table), and the
// relay is SIGKILLed. The next relay fences the first one's producer,
// reads the progress record and marks those rows published without
// sending them again: a read_committed consumer sees every event once.
func TestExactlyOnceKillBetweenKafkaAndDatabase(t *testing.T) {
	dsn, pool := pgtest.NewDB(t)
	pgtest.Exec(t, pool, chaosTable)
	c := kafkaCluster(t, kfake.SeedTopics(3, "orders"), kfake.SeedTopics(1, "outbox_relay_progress"))
	brokers := c.ListenAddrs()
	col := collectCommitted(t, brokers, "orders")
	bin := buildRelay(t)
	cfg := exactlyOnceConfig(t, dsn, brokers)
	fillOrders(t, pool, 60)

	// The table locked in SHARE mode: claims (FOR UPDATE) go through, the
	// UPDATE that marks rows published waits.
	ctx := context.Background()
	lock, err := pool.Begin(ctx)
	if err != nil {
		t.Fatal(err)
	}
	defer func() { _ = lock.Rollback(ctx) }()
	if _, err := lock.Exec(ctx, "LOCK TABLE outbox IN SHARE MODE"); err != nil {
		t.Fatal(err)
	}
	first := startRelay(t, bin, cfg)
	waitFor(t, 20*time.Second, "the batch committed to Kafka", func() (bool, string) {
		n := len(committedByID(col))
		return n == 60, fmt.Sprintf("%d of 60 visible to read_committed", n)
	})
	var marked int
	_ = pool.QueryRow(ctx, "SELECT count(*) FROM outbox WHERE published").Scan(&marked)
	if marked != 0 {
		t.Fatalf("%d rows marked while the table was locked", marked)
	}
	first.kill(t)
	if err := lock.Rollback(ctx); err != nil {
		t.Fatal(err)
	}
	second := startRelay(t, bin, cfg)
	waitFor(t, 20*time.Second, "every row marked published", func() (bool, string) {
		_ = pool.QueryRow(ctx, "SELECT count(*) FROM outbox WHERE published").Scan(&marked)
		return marked == 60, fmt.Sprintf("%d of 60 marked", marked)
	})
	fillOrders(t, pool, 40) // and the relay goes on
	waitFor(t, 20*time.Second, "the next rows delivered", func() (bool, string) {
		n := len(committedByID(col))
		return n == 100, fmt.Sprintf("%d of 100", n)
	})
	for id, n := range committedByID(col) {
		if n != 1 {
			t.Errorf("event %s seen %d times by a read_committed consumer", id, n)
		}
	}
	second.checkOutput(t)
	if !strings.Contains(second.out.String(), "now marked") {
		t.Errorf("the takeover did not say it marked the delivered events:\n%s", second.out.String())
	}
}

// TestChaosExactlyOnceKills is TestChaosKillAtEveryStep with delivery
// exactly_once: SIGKILLs while a produce is under way, while the Kafka
// transaction ends, with a claim open and at random; a read_committed
// consumer sees every event, none twice.
func TestChaosExactlyOnceKills(t *testing.T) {
	t.Parallel()
	kills := 8
	if chaosFull() {
		kills = 32
	}
	p := newProcChaosExactlyOnce(t, "1s", 50)
	rep := p.finish(killAtSteps(t, p, kills, []string{"publish", "end of transaction", "claim", "random"}))
	t.Logf("%d kills: %s", kills, rep)
	if !rep.OK() || rep.Duplicates > 0 {
		t.Error(rep)
	}
}

// TestChaosExactlyOnceFrozenHolder: the holder frozen past its lease with a
// transaction open, the other replica takes over (its producer id fences
// the frozen one's), then the frozen one resumes: nothing it sends after
// is visible, nothing is seen twice.
func TestChaosExactlyOnceFrozenHolder(t *testing.T) {
	t.Parallel()
	freezes := 3
	if chaosFull() {
		freezes = 12
	}
	p := newProcChaosExactlyOnce(t, "1s", 50)
	rep := p.finish(freezeHolders(t, p, freezes))
	t.Logf("%d freezes: %s", freezes, rep)
	if !rep.OK() || rep.Duplicates > 0 {
		t.Error(rep)
	}
}

// TestChaosExactlyOnceAmbiguousAcks: the broker applies produce requests
// and answers them with an error; it applies transaction commits, loses
// their answers and refuses the client's retry of each with an error; it
// refuses other commits outright. The relay does not know whether a batch
// committed, holds it, and its takeover reads the progress record: a
// read_committed consumer sees every event once.
func TestChaosExactlyOnceAmbiguousAcks(t *testing.T) {
	t.Parallel()
	// Every fault stops the source and takes it over again, and the rows
	// of the batch it hit wait out their hold (a second by default): the
	// full size's 180 faults take minutes.
	rows, faults, within := 3000, 6, 90*time.Second
	if chaosFull() {
		rows, faults, within = 30000, 60, 6*time.Minute
	}
	dsn, pool, l := chaosBacklog(t, rows)
	var c *kfake.Cluster
	var nc atomic.Int64
	var mu sync.Mutex
	var retries []*kfake.FaultHandle
	lost := &commitCutter{
		cut: func() bool { n := nc.Add(1); return n%4 == 0 && n <= int64(4*faults) },
		after: func(txnID string) {
			h := c.Fault(kfake.Fault{Keys: []kmsg.Key{kmsg.EndTxn}, TxnID: txnID, Err: kerr.RequestTimedOut})
			mu.Lock()
			retries = append(retries, h)
			mu.Unlock()
		},
	}
	c = kafkaCluster(t, kfake.SeedTopics(4, "orders"), kfake.SeedTopics(1, "outbox_relay_progress"), lost.listen())
	var np, ne int
	produce := c.Fault(kfake.Fault{Keys: []kmsg.Key{kmsg.Produce}, Topic: "orders", Err: kerr.RequestTimedOut, Count: faults,
		When: func(kmsg.Request) bool { np++; return np%5 == 0 }})
	refused := c.Fault(kfake.Fault{Keys: []kmsg.Key{kmsg.EndTxn}, Err: kerr.RequestTimedOut, Count: faults,
		When: func(kmsg.Request) bool { ne++; return ne%7 == 0 }})
	col := collectCommitted(t, c.ListenAddrs(), "orders")
	src := chaosSource(100, 2)
	src.Delivery = config.DeliveryExactlyOnce
	runRelay(t, baseConfig(dsn, c.ListenAddrs(), src))
	rep := settle(t, pool, l, col, rows, within)
	var retried int
	mu.Lock()
	defer mu.Unlock()
	for _, h := range retries {
		retried += h.Hits()
	}
	t.Logf("%d rows; %d produce requests answered with an error after being applied; %d commits applied, their answers lost and %d retries refused; %d commits refused: %s",
		rows, produce.Hits(), lost.cuts.Load(), retried, refused.Hits(), rep)
	if retried == 0 {
		t.Fatal("no applied commit was answered with an error: the scenario proves nothing")
	}
	if !rep.OK() || rep.Duplicates != 0 {
		t.Error(rep)
	}
}

// TestExactlyOnceDeploymentsShareTheProgressTopic: two deployments (relay
// schemas) each relay a source named "orders" (tables whose ids are the
// same numbers) through one cluster and one progress topic: neither takes
// the other's progress for its own.
func TestExactlyOnceDeploymentsShareTheProgressTopic(t *testing.T) {
	t.Parallel()
	c := kafkaCluster(t, kfake.SeedTopics(3, "orders"), kfake.SeedTopics(1, "outbox_relay_progress"))
	col := collectCommitted(t, c.ListenAddrs(), "orders")
	for i, schema := range []string{"relay_a", "relay_b"} {
		dsn, pool := pgtest.NewDB(t)
		pgtest.Exec(t, pool, chaosTable)
		fillOrders(t, pool, 50)
		src := chaosSource(20, 2)
		src.Name, src.Delivery = "orders", config.DeliveryExactlyOnce
		cfg := baseConfig(dsn, c.ListenAddrs(), src)
		cfg.RelaySchema = schema
		stop := runRelay(t, cfg)
		waitFor(t, 20*time.Second, schema+"'s rows delivered", func() (bool, string) {
			var n int
			_ = pool.QueryRow(context.Background(), "SELECT count(*) FROM outbox WHERE published").Scan(&n)
			return n == 50, fmt.Sprintf("%d of 50 marked", n)
		})
		stop()
		if got := len(col.records()); got < 50*(i+1) {
			waitFor(t, 10*time.Second, "the records", func() (bool, string) {
				return len(col.records()) == 50*(i+1), fmt.Sprint(len(col.records()))
			})
		}
	}
	if n := len(col.records()); n != 100 {
		t.Errorf("%d records, want 50 of each deployment", n)
	}
}

// TestExactlyOnceSlowBatchPastTransactionTimeout: a batch's commit reaches
// the broker only after the transaction timeout, so the broker aborts the
// transaction and fences the producer; the relay takes the source over with
// a new producer and sends the batch again: nothing lost, nothing twice.
func TestExactlyOnceSlowBatchPastTransactionTimeout(t *testing.T) {
	t.Parallel()
	const rows = 300
	dsn, pool := pgtest.NewDB(t)
	pgtest.Exec(t, pool, chaosTable)
	l := eventledger.New()
	fillChaos(t, pool, l, "orders", "k", rows, 20, 0)
	c := kafkaCluster(t, kfake.SeedTopics(2, "orders"), kfake.SeedTopics(1, "outbox_relay_progress"))
	var slowed atomic.Bool
	c.ControlKey(int16(kmsg.EndTxn), func(req kmsg.Request) (kmsg.Response, error, bool) {
		c.KeepControl()
		if !req.(*kmsg.EndTxnRequest).Commit || !slowed.CompareAndSwap(false, true) { // the first batch's commit
			return nil, nil, false
		}
		c.SleepControl(func() { time.Sleep(2500 * time.Millisecond) }) // past the 1s transaction timeout: the point of this fault
		return nil, nil, false
	})
	col := collectCommitted(t, c.ListenAddrs(), "orders")
	src := chaosSource(100, 2)
	src.Delivery = config.DeliveryExactlyOnce
	cfg := baseConfig(dsn, c.ListenAddrs(), src)
	s := cfg.Sinks["kafka"]
	s.TransactionTimeout = config.Duration(time.Second)
	cfg.Sinks["kafka"] = s
	runRelay(t, cfg)
	rep := settle(t, pool, l, col, rows, 60*time.Second)
	t.Logf("a batch slowed past the transaction timeout: %s", rep)
	if !slowed.Load() {
		t.Fatal("no produce was slowed: the scenario proves nothing")
	}
	if !rep.OK() || rep.Duplicates > 0 {
		t.Error(rep)
	}
}

// TestExactlyOnceLateCommitBelowProgress: a row whose transaction commits
// after rows with higher ids were delivered (commit order is not id order)
// is delivered once after a takeover: progress names the ids it covers,
// not a position in the table that the late row would fall below.
func TestExactlyOnceLateCommitBelowProgress(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	c := kafkaCluster(t, kfake.SeedTopics(3, "orders"), kfake.SeedTopics(1, "outbox_relay_progress"))
	col := collectCommitted(t, c.ListenAddrs(), "orders")
	dsn, pool := pgtest.NewDB(t)
	pgtest.Exec(t, pool, chaosTable)
	late, err := pool.Begin(ctx)
	if err != nil {
		t.Fatal(err)
	}
	defer func() { _ = late.Rollback(ctx) }()
	var lateID int64
	if err := late.QueryRow(ctx, `INSERT INTO outbox (k, topic, payload) VALUES ('late', 'orders', '{"late": true}') RETURNING id`).Scan(&lateID); err != nil {
		t.Fatal(err)
	}
	fillOrders(t, pool, 50)
	src := chaosSource(10, 2)
	src.Delivery = config.DeliveryExactlyOnce
	cfg := baseConfig(dsn, c.ListenAddrs(), src)
	stop := runRelay(t, cfg)
	col.waitDistinct(t, 50, 20*time.Second)
	stop()
	if err := late.Commit(ctx); err != nil {
		t.Fatal(err)
	}
	runRelay(t, cfg) // takes the source over: reads the progress, then claims
	recs := col.waitDistinct(t, 51, 20*time.Second)
	var lateSeen int
	for _, r := range col.records() {
		if string(r.Value) == `{"late": true}` {
			lateSeen++
		}
	}
	if lateSeen != 1 || len(col.records()) != 51 {
		t.Errorf("the late row (id %d, below ids already delivered) seen %d times; %d records for %d events, want 51 once each",
			lateID, lateSeen, len(col.records()), len(distinct(recs)))
	}
}

// TestExactlyOnceFailedDatabaseCommitStaysInProgress: a batch's Kafka
// transaction commits and its database commit then fails, while the next
// batch on the same producer is still to commit. The failed batch's ids
// must stay in that producer's progress records (its database commit was
// never confirmed), so that the takeover that follows marks its rows
// published instead of claiming and sending them again.
//
// Batches of five rows go to topics t1, t2, t3 (producers 0, 1, 0). A
// trigger fails t1's commit once; the test lets it fail only once t3's
// batch is under way, and lets t3's transaction write its progress record
// only once the completion of t1 has ended and t2's has begun.
func TestExactlyOnceFailedDatabaseCommitStaysInProgress(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	dsn, pool := pgtest.NewDB(t)
	pgtest.Exec(t, pool, chaosTable, `CREATE SEQUENCE fail_once`,
		`CREATE FUNCTION gate() RETURNS trigger LANGUAGE plpgsql AS $$
BEGIN
  IF NEW.published AND NOT OLD.published THEN
    IF NEW.topic = 't1' THEN
      PERFORM pg_advisory_xact_lock(1);
      IF nextval('fail_once') = 1 THEN
        RAISE EXCEPTION 'the database refuses this batch';
      END IF;
    ELSIF NEW.topic = 't2' THEN
      PERFORM pg_advisory_xact_lock(2);
    END IF;
  END IF;
  RETURN NEW;
END $$`,
		`CREATE TRIGGER gate BEFORE UPDATE ON outbox FOR EACH ROW EXECUTE FUNCTION gate()`,
		`INSERT INTO outbox (k, topic, payload)
SELECT 'k' || g, 't' || ((g - 1) / 5 + 1), jsonb_build_object('i', g) FROM generate_series(1, 15) g`)

	// The test's own session holds advisory locks 1 and 2 until it lets
	// the completions of t1 and t2 go on.
	locks, err := pool.Acquire(ctx)
	if err != nil {
		t.Fatal(err)
	}
	defer locks.Release()
	if _, err := locks.Exec(ctx, "SELECT pg_advisory_lock(1), pg_advisory_lock(2)"); err != nil {
		t.Fatal(err)
	}
	waiting := func(key int) func() (bool, string) {
		return func() (bool, string) {
			var n int
			err := pool.QueryRow(ctx, `SELECT count(*) FROM pg_locks WHERE locktype = 'advisory' AND objid = $1 AND NOT granted
  AND database = (SELECT oid FROM pg_database WHERE datname = current_database())`, key).Scan(&n)
			return err == nil && n > 0, fmt.Sprint(n, " waiting ", err)
		}
	}

	c := kafkaCluster(t, kfake.SeedTopics(1, "t1", "t2", "t3"), kfake.SeedTopics(1, "outbox_relay_progress"))
	t3 := c.TopicInfo("t3").TopicID // produce requests name topics by id from v13
	reached, release := make(chan struct{}), make(chan struct{})
	var gated atomic.Bool
	c.ControlKey(int16(kmsg.Produce), func(req kmsg.Request) (kmsg.Response, error, bool) {
		c.KeepControl()
		for _, tp := range req.(*kmsg.ProduceRequest).Topics {
			if (tp.Topic == "t3" || tp.TopicID == t3) && gated.CompareAndSwap(false, true) {
				close(reached)
				c.SleepControl(func() { <-release })
			}
		}
		return nil, nil, false
	})
	releaseOnce := sync.OnceFunc(func() { close(release) })
	defer releaseOnce()

	src := chaosSource(5, 3)
	src.Delivery = config.DeliveryExactlyOnce
	cfg := baseConfig(dsn, c.ListenAddrs(), src)
	runRelay(t, cfg)

	select {
	case <-reached:
	case <-time.After(30 * time.Second):
		t.Fatal("t3's batch never produced")
	}
	waitFor(t, 30*time.Second, "t1's completion waiting, its Kafka transaction committed", waiting(1))
	if _, err := locks.Exec(ctx, "SELECT pg_advisory_unlock(1)"); err != nil {
		t.Fatal(err)
	}
	// Completions go in claim order: t2's begins once t1's has failed and
	// its worker has done all it does about it.
	waitFor(t, 30*time.Second, "t2's completion waiting", waiting(2))
	releaseOnce()
	if _, err := locks.Exec(ctx, "SELECT pg_advisory_unlock(2)"); err != nil {
		t.Fatal(err)
	}

	waitFor(t, 60*time.Second, "every row marked published", func() (bool, string) {
		var pending int
		err := pool.QueryRow(ctx, "SELECT count(*) FROM outbox WHERE NOT published").Scan(&pending)
		return err == nil && pending == 0, fmt.Sprint(pending, " pending ", err)
	})
	var failures int64
	if err := pool.QueryRow(ctx, "SELECT last_value FROM fail_once").Scan(&failures); err != nil || failures < 6 {
		t.Fatalf("t1's rows went through the trigger %d times (%v): want the failed commit, then the takeover's", failures, err)
	}
	seen := readCommitted(t, c.ListenAddrs(), "t1", "t2", "t3")
	if len(seen) != 15 {
		t.Errorf("%d events seen by a read_committed consumer, want 15", len(seen))
	}
	for id, n := range seen {
		if n != 1 {
			t.Errorf("event %s seen %d times by a read_committed consumer", id, n)
		}
	}
}

// readCommitted reads single-partition topics to their end as a
// read_committed consumer and counts the records of each event id. Call it
// when no transaction is open on them.
func readCommitted(t *testing.T, brokers []string, topics ...string) map[string]int {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	admin, err := kgo.NewClient(kgo.SeedBrokers(brokers...))
	if err != nil {
		t.Fatal(err)
	}
	defer admin.Close()
	ends, err := kadm.NewClient(admin).ListEndOffsets(ctx, topics...)
	if err != nil || ends.Error() != nil {
		t.Fatal(err, ends.Error())
	}
	want := map[string]int64{}
	ends.Each(func(o kadm.ListedOffset) {
		if o.Offset > 0 {
			want[o.Topic] = o.Offset
		}
	})
	cl, err := kgo.NewClient(kgo.SeedBrokers(brokers...), kgo.ConsumeTopics(topics...),
		kgo.ConsumeResetOffset(kgo.NewOffset().AtStart()), kgo.FetchIsolationLevel(kgo.ReadCommitted()),
		kgo.KeepControlRecords(), kgo.FetchMaxWait(100*time.Millisecond))
	if err != nil {
		t.Fatal(err)
	}
	defer cl.Close()
	out := map[string]int{}
	for len(want) > 0 {
		fs := cl.PollFetches(ctx)
		if ctx.Err() != nil {
			t.Fatalf("reading %v to their end: %v; left %v", topics, ctx.Err(), want)
		}
		fs.EachRecord(func(r *kgo.Record) {
			end, ok := want[r.Topic]
			if !ok {
				return
			}
			if !r.Attrs.IsControl() {
				id, _ := header(r, "event_id")
				out[id]++
			}
			if r.Offset+1 >= end {
				delete(want, r.Topic)
			}
		})
	}
	return out
}
