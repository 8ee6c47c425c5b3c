package e2e

import (
	"context"
	"fmt"
	"math/rand/v2"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/twmb/franz-go/pkg/kfake"
	"github.com/twmb/franz-go/pkg/kgo"

	eventledger "github.com/outbox-relay/outbox-relay/internal/ledger"
	"github.com/outbox-relay/outbox-relay/internal/mytest"
)

// TestChaosFrozenHolderMariaDB is TestChaosFrozenHolder on MariaDB: two
// relay processes on one table, the lease holder frozen (SIGSTOP) past its
// lease with batches in flight, taken over, resumed. A resumed holder must
// lock no row (its claim checks the lease before it locks any) and complete
// nothing; order holds on first delivery and nothing is lost.
func TestChaosFrozenHolderMariaDB(t *testing.T) {
	t.Parallel()
	freezes := 3
	if chaosFull() {
		freezes = 10
	}
	mariaDBChaos(t, "at_least_once", freezes, 0)
}

// TestChaosExactlyOnceMariaDB is the same with delivery exactly_once, and
// SIGKILLs besides the freezes: a read_committed consumer sees every event
// once.
func TestChaosExactlyOnceMariaDB(t *testing.T) {
	t.Parallel()
	freezes, kills := 2, 4
	if chaosFull() {
		freezes, kills = 8, 16
	}
	mariaDBChaos(t, "exactly_once", freezes, kills)
}

// mariaDBChaos runs two relays on a MariaDB outbox under a producer,
// freezes the lease holder past its lease freezes times (see
// freezeHolder), then SIGKILLs the holder kills times, and checks the
// ledger: nothing lost, order on first delivery, and no duplicate with
// exactly_once.
func mariaDBChaos(t *testing.T, delivery string, freezes, kills int) {
	t.Helper()
	bin := buildRelay(t)
	ctx := context.Background()
	name, dsn := mytest.NewDatabase(t, "chaos_frozen")
	db := openMySQL(t, dsn)
	mytest.Exec(t, db, "CREATE TABLE outbox (id BIGINT UNSIGNED AUTO_INCREMENT PRIMARY KEY, topic VARCHAR(255) NOT NULL, "+
		"`key` VARCHAR(255) NOT NULL, payload JSON NOT NULL)")
	c := kafkaCluster(t, kfake.SeedTopics(4, "orders"), kfake.SeedTopics(1, "outbox_relay_progress"))
	brokers := c.ListenAddrs()
	relayDB := "relay_" + mytest.Suffix()
	t.Cleanup(func() { mytest.Drop(t, relayDB) })
	cfg := filepath.Join(t.TempDir(), "relay.yaml")
	if err := os.WriteFile(cfg, fmt.Appendf(nil, `log: {level: warn, format: text}
admin: {listen: "off"}
shutdown: {timeout: 5s}
lease_ttl: 1s
relay_schema: %s
databases:
  main: {driver: mysql, dsn: %q}
sinks:
  kafka: {type: kafka, brokers: [%q]}
sources:
  - name: chaos
    table: %s.outbox
    preset: delete
    batch_size: 50
    pipeline: 3
    poll: {min: 5ms, max: 50ms}
    delivery: %s
`, relayDB, dsn, strings.Join(brokers, ","), name, delivery), 0o600); err != nil {
		t.Fatal(err)
	}
	col := collect(t, brokers, "orders")
	if delivery == "exactly_once" {
		col = collectCommitted(t, brokers, "orders")
	}
	l := eventledger.New()
	var rows int
	var mu sync.Mutex
	done := make(chan struct{})
	var wg sync.WaitGroup
	wg.Go(func() {
		for i := 0; ; i++ {
			select {
			case <-done:
				return
			default:
			}
			tx, err := db.BeginTx(ctx, nil)
			if err != nil {
				t.Error(err)
				return
			}
			type row struct{ id, k string }
			var got []row
			for range 1 + rand.N(5) {
				k := "k" + strconv.Itoa(rand.N(50))
				res, err := tx.ExecContext(ctx, "INSERT INTO outbox (topic, `key`, payload) VALUES ('orders', ?, JSON_OBJECT('i', ?))", k, i)
				if err != nil {
					t.Error(err)
					_ = tx.Rollback()
					return
				}
				id, _ := res.LastInsertId()
				got = append(got, row{strconv.FormatInt(id, 10), k})
			}
			if err := tx.Commit(); err != nil {
				t.Error(err)
				return
			}
			mu.Lock()
			for _, r := range got {
				l.Commit(r.id, r.k)
			}
			rows += len(got)
			mu.Unlock()
			time.Sleep(time.Duration(2+rand.N(6)) * time.Millisecond) // the producer's pace
		}
	})
	stop := sync.OnceFunc(func() { close(done); wg.Wait() })
	t.Cleanup(stop)
	delivered := func() int { return len(distinct(col.records())) }
	flowing := func(what string, n int) {
		from := delivered()
		waitFor(t, 60*time.Second, what, func() (bool, string) {
			got := delivered()
			return got >= from+n, fmt.Sprintf("%d delivered (%d before)", got, from)
		})
	}
	holder := func() (int, int64) {
		var owner string
		var term int64
		_ = db.QueryRowContext(ctx, "SELECT owner, term FROM "+relayDB+".leases WHERE shard = 'chaos' AND expires_at > UTC_TIMESTAMP(6)").Scan(&owner, &term)
		parts := strings.Split(owner, "/")
		if len(parts) != 3 {
			return 0, term
		}
		pid, _ := strconv.Atoi(parts[1])
		return pid, term
	}
	procs := []*relayProcess{startRelay(t, bin, cfg), startRelay(t, bin, cfg)}
	for f := range freezes {
		freezeHolder(t, f+1, procs, holder, flowing)
		procs = append(procs, startRelay(t, bin, cfg))
	}
	for k := range kills {
		flowing(fmt.Sprintf("events flowing before kill %d", k+1), 200)
		pid, _ := holder()
		for _, pr := range procs {
			if pr.cmd.Process.Pid == pid && !pr.exited() {
				pr.kill(t)
			}
		}
		procs = append(procs, startRelay(t, bin, cfg))
	}
	flowing("events flowing after the last freeze and kill", 200)
	stop()
	waitFor(t, 90*time.Second, "every row delivered", func() (bool, string) {
		var left int
		_ = db.QueryRowContext(ctx, "SELECT COUNT(*) FROM outbox").Scan(&left)
		mu.Lock()
		n := rows
		mu.Unlock()
		return left == 0 && delivered() >= n, fmt.Sprintf("%d rows left, %d of %d delivered", left, delivered(), n)
	})
	for _, r := range col.records() {
		id, _ := header(r, "event_id")
		l.Deliver(id)
	}
	for _, pr := range procs {
		pr.checkOutput(t)
	}
	rep := l.Check(nil)
	t.Logf("MariaDB, %s, %d freezes, %d kills: %s", delivery, freezes, kills, rep)
	if !rep.OK() || (delivery == "exactly_once" && rep.Duplicates > 0) {
		t.Error(rep)
		logKeyRecords(t, col.records(), rep.OutOfOrder)
	}
}

// logKeyRecords logs, for the keys of the first out-of-order reports
// ("k16: #130 after #131"), every record of the key: where it is, which
// producer wrote it and when, to tell which relay sent what.
func logKeyRecords(t *testing.T, recs []*kgo.Record, outOfOrder []string) {
	t.Helper()
	for _, o := range outOfOrder[:min(len(outOfOrder), 2)] {
		key, _, _ := strings.Cut(o, ":")
		for _, r := range recs {
			if string(r.Key) != key {
				continue
			}
			id, _ := header(r, "event_id")
			t.Logf("%s: event %s at partition %d offset %d, producer %d epoch %d, %s", key, id, r.Partition, r.Offset,
				r.ProducerID, r.ProducerEpoch, r.Timestamp.Format("15:04:05.000"))
		}
	}
}
