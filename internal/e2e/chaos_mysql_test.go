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
	bin := buildRelay(t)
	ctx := context.Background()
	name, dsn := mytest.NewDatabase(t, "chaos_frozen")
	db := openMySQL(t, dsn)
	mytest.Exec(t, db, "CREATE TABLE outbox (id BIGINT UNSIGNED AUTO_INCREMENT PRIMARY KEY, topic VARCHAR(255) NOT NULL, "+
		"`key` VARCHAR(255) NOT NULL, payload JSON NOT NULL)")
	c := kafkaCluster(t, kfake.SeedTopics(4, "orders"))
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
`, relayDB, dsn, strings.Join(brokers, ","), name), 0o600); err != nil {
		t.Fatal(err)
	}
	col := collect(t, brokers, "orders")
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
	flowing("events flowing after the last freeze", 200)
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
	t.Logf("MariaDB, %d freezes: %s", freezes, rep)
	if !rep.OK() {
		t.Error(rep)
	}
}
