package e2e

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"math/rand/v2"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"sync/atomic"
	"syscall"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgxpool"
	"github.com/twmb/franz-go/pkg/kfake"

	"github.com/outbox-relay/outbox-relay/internal/fixtures"
	"github.com/outbox-relay/outbox-relay/internal/pgtest"
)

// ledgerRow is one row a producer inserted and committed.
type ledgerRow struct {
	producer, tx int
	key          string
}

// ledger records what the producers committed and rolled back.
type ledger struct {
	mu         sync.Mutex
	committed  map[string]ledgerRow // event id -> where it came from
	rolledBack map[string]string    // event id -> payload marker
	txs        int
	aborted    int
	n          atomic.Int64 // committed rows, readable without the lock
}

// writeTx writes one transaction of n rows for producer's keys and records
// it in the ledger: committed, or (rollback) rolled back on purpose.
func writeTx(ctx context.Context, pool *pgxpool.Pool, l *ledger, producer, tx int, keyIDs []string, n int, rollback bool) error {
	type ins struct{ id, key, marker string }
	var done []ins
	err := pgx.BeginFunc(ctx, pool, func(dbtx pgx.Tx) error {
		done = done[:0]
		for i := range n {
			key := keyIDs[rand.N(len(keyIDs))]
			marker := fmt.Sprintf("ok-%d-%d-%d", producer, tx, i)
			if rollback {
				marker = fmt.Sprintf("rb-%d-%d-%d", producer, tx, i)
			}
			var id string
			err := dbtx.QueryRow(ctx, `INSERT INTO journey_matcher.outbox (aggregate_id, aggregate_type, event_type, payload, correlation_id)
VALUES ($1, 'journey', 'journey.created', jsonb_build_object('marker', $2::text, 'producer', $3::int, 'tx', $4::int), gen_random_uuid())
RETURNING id::text`, key, marker, producer, tx).Scan(&id)
			if err != nil {
				return err
			}
			done = append(done, ins{id, key, marker})
		}
		if rollback {
			return errRollback
		}
		return nil
	})
	switch {
	case rollback && errors.Is(err, errRollback):
		l.mu.Lock()
		for _, r := range done {
			l.rolledBack[r.id] = r.marker
		}
		l.aborted++
		l.mu.Unlock()
		return nil
	case err != nil:
		return fmt.Errorf("producer %d: transaction %d: %w", producer, tx, err)
	}
	l.mu.Lock()
	for _, r := range done {
		l.committed[r.id] = ledgerRow{producer: producer, tx: tx, key: r.key}
	}
	l.txs++
	l.mu.Unlock()
	l.n.Add(int64(len(done)))
	return nil
}

// writeBurst commits n rows for producer's keys in one statement.
func writeBurst(ctx context.Context, pool *pgxpool.Pool, l *ledger, producer, tx int, keyIDs []string, n int) error {
	keys, markers := make([]string, n), make([]string, n)
	for i := range n {
		keys[i], markers[i] = keyIDs[rand.N(len(keyIDs))], fmt.Sprintf("ok-%d-%d-%d", producer, tx, i)
	}
	rows, err := pool.Query(ctx, `INSERT INTO journey_matcher.outbox (aggregate_id, aggregate_type, event_type, payload, correlation_id)
SELECT u.k, 'journey', 'journey.created', jsonb_build_object('marker', u.m, 'producer', $3::int, 'tx', $4::int), gen_random_uuid()
FROM unnest($1::uuid[], $2::text[]) AS u(k, m)
RETURNING id::text, aggregate_id::text`, keys, markers, producer, tx)
	if err != nil {
		return fmt.Errorf("burst %d: %w", tx, err)
	}
	type ins struct{ id, key string }
	done, err := pgx.CollectRows(rows, func(r pgx.CollectableRow) (ins, error) {
		var x ins
		err := r.Scan(&x.id, &x.key)
		return x, err
	})
	if err != nil {
		return fmt.Errorf("burst %d: %w", tx, err)
	}
	l.mu.Lock()
	for _, r := range done {
		l.committed[r.id] = ledgerRow{producer: producer, tx: tx, key: r.key}
	}
	l.txs++
	l.mu.Unlock()
	l.n.Add(int64(len(done)))
	return nil
}

// producerKeys are the aggregate ids (the order keys) of one producer.
func producerKeys(producer, keys int) []string {
	ids := make([]string, keys)
	for i := range ids {
		ids[i] = fmt.Sprintf("%08x-0000-4000-8000-%012x", producer, i)
	}
	return ids
}

// produceOutbox writes rows into journey_matcher.outbox until stop is closed
// or limit rows are committed: transactions of 1-8 rows, about one in five
// rolled back, about a dozen a second. Each producer has its own keys, so a key's transactions
// commit in the order they were written.
func produceOutbox(t *testing.T, pool *pgxpool.Pool, l *ledger, producer, keys, limit int, stop <-chan struct{}) {
	keyIDs := producerKeys(producer, keys)
	for tx := 0; ; tx++ {
		select {
		case <-stop:
			return
		default:
		}
		if l.n.Load() >= int64(limit) {
			return
		}
		if err := writeTx(context.Background(), pool, l, producer, tx, keyIDs, 1+rand.N(8), rand.N(5) == 0); err != nil {
			t.Error(err)
			return
		}
		// A steady trickle (a few hundred rows a second in all) that the
		// relay keeps up with; the bursts before each kill make backlog.
		select {
		case <-stop:
			return
		case <-time.After(40*time.Millisecond + rand.N(80*time.Millisecond)):
		}
	}
}

var errRollback = errors.New("roll back on purpose")

// TestNoLossAcrossSIGKILL runs the relay binary as a child process while
// producers write (and roll back) outbox rows, kills it with SIGKILL three
// times in the middle of the flow, restarts it each time, and checks that
// every committed row arrives, no rolled-back row does, duplicates stay
// within what the killed processes had in flight, per-key order holds for
// first deliveries, and every row ends up marked published.
func TestNoLossAcrossSIGKILL(t *testing.T) {
	t.Parallel()
	const (
		batchSize = 50
		pipeline  = 3
		kills     = 3
		producers = 8
		keys      = 4     // per producer
		limit     = 20000 // committed rows, a safety cap
		topic     = "journey.created"
		// Before each kill, a burst of burstTxs transactions of burstRows
		// rows each, written by one more producer.
		burstTxs  = 4
		burstRows = 250
	)
	burstKeys, burstTx := producerKeys(producers, keys), 0
	bin := buildRelay(t)
	ctx := context.Background()
	dsn, pool := pgtest.NewDB(t)
	pgtest.Exec(t, pool, fixtures.Seed000)
	c := kafkaCluster(t, kfake.SeedTopics(3, topic))
	brokers := c.ListenAddrs()

	cfgPath := filepath.Join(t.TempDir(), "relay.yaml")
	// A short lease: a restarted relay takes the source over once the
	// killed one's lease has expired.
	cfg := fmt.Sprintf(`log: {level: warn, format: text}
admin: {listen: "off"}
shutdown: {timeout: 10s}
lease_ttl: 2s
databases:
  main:
    dsn: %q
sinks:
  kafka:
    type: kafka
    brokers: [%q]
sources:
  - name: journeys
    table: journey_matcher.outbox
    preset: published-flag
    batch_size: %d
    pipeline: %d
    poll: {min: 5ms, max: 50ms}
`, dsn, strings.Join(brokers, ","), batchSize, pipeline)
	if err := os.WriteFile(cfgPath, []byte(cfg), 0o600); err != nil {
		t.Fatal(err)
	}

	col := collect(t, brokers, topic)
	received := func() int { return len(distinct(col.records())) }

	l := &ledger{committed: map[string]ledgerRow{}, rolledBack: map[string]string{}}
	stop := make(chan struct{})
	var wg sync.WaitGroup
	for p := range producers {
		wg.Go(func() { produceOutbox(t, pool, l, p, keys, limit, stop) })
	}
	stopProducers := sync.OnceFunc(func() { close(stop); wg.Wait() })
	t.Cleanup(stopProducers)

	proc := startRelay(t, bin, cfgPath)
	var procs []*relayProcess
	procs = append(procs, proc)
	last := 0
	for k := 1; k <= kills; k++ {
		// Kill while events flow: once this process has delivered a few
		// hundred events, a burst of committed rows lands, and the kill
		// comes while the relay is working through it.
		waitFor(t, 30*time.Second, fmt.Sprintf("events flowing before kill %d", k), func() (bool, string) {
			got := received()
			return got >= last+300, fmt.Sprintf("received %d (%d at the previous start)", got, last)
		})
		for range burstTxs {
			if err := writeBurst(ctx, pool, l, producers, burstTx, burstKeys, burstRows); err != nil {
				t.Fatal(err)
			}
			burstTx++
		}
		from := received()
		waitFor(t, 30*time.Second, fmt.Sprintf("the burst flowing before kill %d", k), func() (bool, string) {
			got := received()
			return got >= from+burstTxs*burstRows/10, fmt.Sprintf("received %d (%d after the burst)", got, from)
		})
		var pending int
		if err := pool.QueryRow(ctx, "SELECT count(*) FROM journey_matcher.outbox WHERE NOT published").Scan(&pending); err != nil {
			t.Fatal(err)
		}
		if pending == 0 {
			t.Logf("kill %d: the relay caught up before the kill", k)
		}
		before := received()
		proc.kill(t)
		proc.checkOutput(t)
		last = received()
		t.Logf("kill %d: SIGKILL pid %d with %d rows pending, %d events received at the kill (%d just after), %d committed", k, proc.cmd.Process.Pid, pending, before, last, l.n.Load())
		proc = startRelay(t, bin, cfgPath)
		procs = append(procs, proc)
	}
	// Let the last process take some live traffic, then stop writing.
	waitFor(t, 30*time.Second, "events flowing after the last restart", func() (bool, string) {
		got := received()
		return got >= last+300, fmt.Sprintf("received %d", got)
	})
	stopProducers()

	l.mu.Lock()
	committed, rolledBack, txs, aborted := l.committed, l.rolledBack, l.txs, l.aborted
	l.mu.Unlock()
	if len(rolledBack) == 0 {
		t.Fatal("no transaction was rolled back; the test proves nothing about rolled-back rows")
	}
	waitFor(t, 40*time.Second, "every committed event", func() (bool, string) {
		got := distinct(col.records())
		missing := 0
		for id := range committed {
			if _, ok := got[id]; !ok {
				missing++
			}
		}
		return missing == 0, fmt.Sprintf("%d of %d committed events missing", missing, len(committed))
	})
	waitFor(t, 20*time.Second, "every row marked published", func() (bool, string) {
		var pending, published int
		if err := pool.QueryRow(ctx, `SELECT count(*) FILTER (WHERE NOT published), count(*) FILTER (WHERE published AND published_at IS NOT NULL)
FROM journey_matcher.outbox`).Scan(&pending, &published); err != nil {
			return false, err.Error()
		}
		return pending == 0 && published == len(committed), fmt.Sprintf("%d pending, %d published of %d", pending, published, len(committed))
	})
	// Nothing more may arrive after that; give stragglers a moment.
	time.Sleep(200 * time.Millisecond)

	// A graceful stop of the last process exits 0.
	if err := proc.cmd.Process.Signal(syscall.SIGTERM); err != nil {
		t.Fatal(err)
	}
	if ws := proc.wait(t, 20*time.Second); ws.ExitStatus() != 0 {
		t.Errorf("relay exited with status %v after SIGTERM:\n%s", ws, proc.out.String())
	}
	for _, p := range procs {
		p.checkOutput(t)
	}

	recs := col.records()
	got := distinct(recs)
	var unknown, rolledBackSeen int
	for _, r := range recs {
		id, _ := header(r, "event_id")
		var v struct {
			Marker string `json:"marker"`
		}
		if err := json.Unmarshal(r.Value, &v); err != nil {
			t.Fatalf("event %s: payload %q: %v", id, r.Value, err)
		}
		if _, ok := rolledBack[id]; ok || strings.HasPrefix(v.Marker, "rb-") {
			rolledBackSeen++
			if rolledBackSeen <= 5 {
				t.Errorf("rolled-back row published: event %s, marker %s", id, v.Marker)
			}
			continue
		}
		if _, ok := committed[id]; !ok {
			unknown++
			t.Errorf("event %s (marker %s) is in no producer's ledger", id, v.Marker)
		}
	}
	if rolledBackSeen > 0 {
		t.Errorf("%d rolled-back rows were published", rolledBackSeen)
	}

	// Per key, first deliveries follow the order of the producer's
	// transactions (a key belongs to one producer, whose transactions
	// commit one after another).
	seen := map[string]bool{}
	lastTx := map[string]int{}
	outOfOrder := 0
	for _, r := range recs {
		id, _ := header(r, "event_id")
		row, ok := committed[id]
		if !ok || seen[id] {
			continue
		}
		seen[id] = true
		if prev, ok := lastTx[row.key]; ok && row.tx < prev {
			outOfOrder++
			if outOfOrder <= 5 {
				t.Errorf("key %s: event %s of transaction %d first delivered after one of transaction %d", row.key, id, row.tx, prev)
			}
		}
		lastTx[row.key] = max(lastTx[row.key], row.tx)
	}

	dups := len(recs) - len(got)
	bound := kills * pipeline * batchSize
	var dead int
	if err := pool.QueryRow(ctx, "SELECT count(*) FROM outbox_relay.failed_events").Scan(&dead); err != nil {
		t.Fatal(err)
	}
	if dead != 0 {
		t.Errorf("%d rows were dead-lettered; none should be", dead)
	}
	t.Logf("committed %d rows in %d transactions; rolled back %d rows in %d transactions; received %d records, %d distinct, %d duplicates (bound %d = %d kills x pipeline %d x batch %d); out of order %d; dead letters %d",
		len(committed), txs, len(rolledBack), aborted, len(recs), len(got), dups, bound, kills, pipeline, batchSize, outOfOrder, dead)
	if dups >= bound {
		t.Errorf("%d duplicates, want fewer than %d (what %d killed processes could have had in flight)", dups, bound, kills)
	}
	if unknown == 0 && rolledBackSeen == 0 && len(got) != len(committed) {
		t.Errorf("received %d distinct events, committed %d", len(got), len(committed))
	}
}
