package e2e

import (
	"context"
	"encoding/json"
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

	"github.com/twmb/franz-go/pkg/kfake"

	"github.com/outbox-relay/outbox-relay/internal/mytest"
)

// TestMariaDBNoLossAcrossSIGKILL runs the relay binary on a MariaDB outbox
// (rows deleted once published) while producers write and roll back rows,
// SIGKILLs it twice mid-flow and restarts it: every committed row arrives,
// no rolled-back row does, each key's first deliveries keep commit order,
// and the table ends empty. The server rolls back the killed relay's claims
// when its connections drop.
func TestMariaDBNoLossAcrossSIGKILL(t *testing.T) {
	t.Parallel()
	const (
		producers = 4
		keys      = 3 // per producer
		kills     = 2
		batchSize = 50
		pipeline  = 3
		topic     = "mysql.events"
	)
	bin := buildRelay(t)
	ctx := context.Background()
	name, dsn := mytest.NewDatabase(t, "e2e_kill")
	db := openMySQL(t, dsn)
	mytest.Exec(t, db, "CREATE TABLE outbox (id BIGINT UNSIGNED AUTO_INCREMENT PRIMARY KEY, topic VARCHAR(255) NOT NULL, "+
		"`key` VARCHAR(255) NOT NULL, payload JSON NOT NULL)")
	c := kafkaCluster(t, kfake.SeedTopics(3, topic))
	brokers := c.ListenAddrs()
	relayDB := "relay_" + mytest.Suffix()
	t.Cleanup(func() { mytest.Drop(t, relayDB) })
	cfgPath := filepath.Join(t.TempDir(), "relay.yaml")
	cfg := fmt.Sprintf(`log: {level: warn, format: text}
admin: {listen: "off"}
shutdown: {timeout: 10s}
lease_ttl: 2s
relay_schema: %s
databases:
  main: {driver: mysql, dsn: %q}
sinks:
  kafka: {type: kafka, brokers: [%q]}
sources:
  - name: events
    table: %s.outbox
    preset: delete
    batch_size: %d
    pipeline: %d
    poll: {min: 5ms, max: 50ms}
`, relayDB, dsn, strings.Join(brokers, ","), name, batchSize, pipeline)
	if err := os.WriteFile(cfgPath, []byte(cfg), 0o600); err != nil {
		t.Fatal(err)
	}
	col := collect(t, brokers, topic)
	received := func() int { return len(distinct(col.records())) }

	var (
		mu         sync.Mutex
		committed  = map[string]bool{}
		rolledBack = map[string]bool{}
		nCommitted atomic.Int64
	)
	stop := make(chan struct{})
	var wg sync.WaitGroup
	for p := range producers {
		wg.Go(func() {
			seq := make([]int, keys)
			for tx := 0; ; tx++ {
				select {
				case <-stop:
					return
				default:
				}
				rollback := rand.N(5) == 0
				k := rand.N(keys)
				key := fmt.Sprintf("p%d-k%d", p, k)
				n := 1 + rand.N(5)
				sqlTx, err := db.BeginTx(ctx, nil)
				if err != nil {
					t.Error(err)
					return
				}
				var ids []string
				for range n {
					payload, _ := json.Marshal(map[string]any{"key": key, "seq": seq[k], "rollback": rollback})
					res, err := sqlTx.ExecContext(ctx, "INSERT INTO outbox (topic, `key`, payload) VALUES (?, ?, ?)", topic, key, payload)
					if err != nil {
						_ = sqlTx.Rollback()
						t.Error(err)
						return
					}
					id, _ := res.LastInsertId()
					ids = append(ids, fmt.Sprint(id))
					if !rollback {
						seq[k]++
					}
				}
				mu.Lock()
				if rollback {
					err = sqlTx.Rollback()
					for _, id := range ids {
						rolledBack[id] = true
					}
				} else if err = sqlTx.Commit(); err == nil {
					for _, id := range ids {
						committed[id] = true
					}
					nCommitted.Add(int64(len(ids)))
				}
				mu.Unlock()
				if err != nil {
					t.Error(err)
					return
				}
				time.Sleep(time.Duration(rand.N(3)) * time.Millisecond)
			}
		})
	}
	stopProducers := sync.OnceFunc(func() { close(stop); wg.Wait() })
	t.Cleanup(stopProducers)

	proc := startRelay(t, bin, cfgPath)
	procs := []*relayProcess{proc}
	last := 0
	for k := 1; k <= kills; k++ {
		waitFor(t, 60*time.Second, fmt.Sprintf("events flowing before kill %d", k), func() (bool, string) {
			got := received()
			return got >= last+300, fmt.Sprintf("received %d (%d at the previous start)", got, last)
		})
		proc.kill(t)
		proc.checkOutput(t)
		last = received()
		t.Logf("kill %d: %d events received, %d committed", k, last, nCommitted.Load())
		proc = startRelay(t, bin, cfgPath)
		procs = append(procs, proc)
	}
	waitFor(t, 60*time.Second, "events flowing after the last restart", func() (bool, string) {
		got := received()
		return got >= last+300, fmt.Sprintf("received %d", got)
	})
	stopProducers()

	mu.Lock()
	defer mu.Unlock()
	if len(rolledBack) == 0 {
		t.Fatal("no transaction was rolled back; the test proves nothing about rolled-back rows")
	}
	waitFor(t, 60*time.Second, "every committed event", func() (bool, string) {
		got := distinct(col.records())
		missing := 0
		for id := range committed {
			if _, ok := got[id]; !ok {
				missing++
			}
		}
		return missing == 0, fmt.Sprintf("%d of %d committed events missing", missing, len(committed))
	})
	waitFor(t, 20*time.Second, "the outbox drained", func() (bool, string) {
		var n int
		_ = db.QueryRowContext(ctx, "SELECT COUNT(*) FROM outbox").Scan(&n)
		return n == 0, fmt.Sprintf("%d rows left", n)
	})
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
	lastSeq := map[string]int{}
	seen := map[string]bool{}
	for _, r := range recs {
		id, _ := header(r, "event_id")
		if rolledBack[id] {
			t.Fatalf("rolled-back row %s was published", id)
		}
		if !committed[id] {
			t.Fatalf("event %s was never committed", id)
		}
		if seen[id] {
			continue // a duplicate of a delivery a killed relay had not acknowledged
		}
		seen[id] = true
		var v struct {
			Key string `json:"key"`
			Seq int    `json:"seq"`
		}
		if err := json.Unmarshal(r.Value, &v); err != nil {
			t.Fatal(err)
		}
		if prev, ok := lastSeq[v.Key]; ok && v.Seq < prev {
			for _, q := range recs {
				var w struct {
					Key string `json:"key"`
					Seq int    `json:"seq"`
				}
				_ = json.Unmarshal(q.Value, &w)
				if w.Key == v.Key && w.Seq >= prev-6 {
					qid, _ := header(q, "event_id")
					t.Logf("key %s: seq %d (event %s) partition %d offset %d producer %d", w.Key, w.Seq, qid, q.Partition, q.Offset, q.ProducerID)
				}
			}
			t.Fatalf("key %s: seq %d first arrived after seq %d", v.Key, v.Seq, prev)
		}
		lastSeq[v.Key] = v.Seq
	}
	dups, bound := len(recs)-len(seen), kills*pipeline*batchSize
	t.Logf("%d committed, %d rolled back, %d records (%d duplicates, bound %d)", len(committed), len(rolledBack), len(recs), dups, bound)
	if dups >= bound {
		t.Errorf("%d duplicates, want fewer than %d (what %d killed processes could have had in flight)", dups, bound, kills)
	}
}
