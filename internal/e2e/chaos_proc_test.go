package e2e

import (
	"cmp"
	"context"
	"fmt"
	"math/rand/v2"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"syscall"
	"testing"
	"time"

	"github.com/jackc/pgx/v5/pgxpool"
	"github.com/twmb/franz-go/pkg/kfake"
	"github.com/twmb/franz-go/pkg/kmsg"

	eventledger "github.com/outbox-relay/outbox-relay/internal/ledger"
	"github.com/outbox-relay/outbox-relay/internal/pgtest"
)

// procChaos is a fault scenario with the relay as child processes: the
// chaos table, a broker, a consumer, a producer writing rows until stopped,
// and the relay's configuration file.
type procChaos struct {
	t       *testing.T
	bin     string
	cfg     string
	pool    *pgxpool.Pool
	cluster *kfake.Cluster
	col     *collector
	l       *eventledger.Ledger
	rows    atomic.Int64
	stop    func()
}

func newProcChaos(t *testing.T, leaseTTL string, keys int) *procChaos {
	t.Helper()
	return newProcChaosWith(t, leaseTTL, keys, "")
}

// newProcChaosExactlyOnce is newProcChaos with delivery exactly_once,
// checked as read_committed consumers see the topic.
func newProcChaosExactlyOnce(t *testing.T, leaseTTL string, keys int) *procChaos {
	t.Helper()
	return newProcChaosWith(t, leaseTTL, keys, "exactly_once")
}

func newProcChaosWith(t *testing.T, leaseTTL string, keys int, delivery string) *procChaos {
	t.Helper()
	return newProcChaosOpts(t, procOpts{leaseTTL: leaseTTL, keys: keys, delivery: delivery})
}

// procOpts shape a procChaos: the relays' lease_ttl, the producer's keys,
// the source's delivery and shards, the relays' log level (default warn).
type procOpts struct {
	leaseTTL string
	keys     int
	delivery string
	shards   int
	logLevel string
	capture  string // sources[].capture; default poll
}

func newProcChaosOpts(t *testing.T, o procOpts) *procChaos {
	t.Helper()
	leaseTTL, keys, delivery := o.leaseTTL, o.keys, o.delivery
	p := &procChaos{t: t, bin: buildRelay(t), l: eventledger.New()}
	dsn, pool := pgtest.NewDB(t)
	p.pool = pool
	pgtest.Exec(t, pool, chaosTable)
	p.cluster = kafkaCluster(t, kfake.SeedTopics(4, "orders"), kfake.SeedTopics(1, "outbox_relay_progress"))
	brokers := p.cluster.ListenAddrs()
	if delivery == "exactly_once" {
		p.col = collectCommitted(t, brokers, "orders")
	} else {
		p.col = collect(t, brokers, "orders")
		delivery = "at_least_once"
	}
	p.cfg = filepath.Join(t.TempDir(), "relay.yaml")
	if err := os.WriteFile(p.cfg, fmt.Appendf(nil, `log: {level: %s, format: text}
admin: {listen: "off"}
shutdown: {timeout: 5s}
lease_ttl: %s
databases:
  main: {dsn: %q}
sinks:
  kafka: {type: kafka, brokers: [%q]}
sources:
  - name: chaos
    table: public.outbox
    batch_size: 50
    pipeline: 3
    poll: {min: 5ms, max: 50ms}
    delivery: %s
    shards: %d
    capture: %s
    layout: {id: id, payload: payload, topic: "{topic}", key: "{k}", created_at: created_at, order_by: id,
             state: {mode: flag, flag: published, published_at: [published_at]}}
`, cmp.Or(o.logLevel, "warn"), leaseTTL, dsn, strings.Join(brokers, ","), delivery, max(o.shards, 1), cmp.Or(o.capture, "poll")), 0o600); err != nil {
		t.Fatal(err)
	}
	// The producer: transactions of 1-5 rows of random keys, a few hundred
	// rows a second.
	done := make(chan struct{})
	var wg sync.WaitGroup
	wg.Go(func() {
		ctx := context.Background()
		for i := 0; ; i++ {
			select {
			case <-done:
				return
			default:
			}
			tx, err := pool.Begin(ctx)
			if err != nil {
				t.Error(err)
				return
			}
			type row struct{ id, k string }
			var got []row
			for range 1 + rand.N(5) {
				var r row
				if err := tx.QueryRow(ctx, `INSERT INTO outbox (k, topic, payload) VALUES ('k' || ($1::int)::text, 'orders', jsonb_build_object('i', $2::int))
RETURNING id::text, k`, rand.N(keys), i).Scan(&r.id, &r.k); err != nil {
					t.Error(err)
					return
				}
				got = append(got, r)
			}
			if err := tx.Commit(ctx); err != nil {
				t.Error(err)
				return
			}
			for _, r := range got {
				p.l.Commit(r.id, r.k)
			}
			p.rows.Add(int64(len(got)))
			time.Sleep(time.Duration(2+rand.N(6)) * time.Millisecond) // the producer's pace
		}
	})
	p.stop = sync.OnceFunc(func() { close(done); wg.Wait() })
	t.Cleanup(p.stop)
	return p
}

func (p *procChaos) start() *relayProcess { return startRelay(p.t, p.bin, p.cfg) }

func (p *procChaos) delivered() int { return len(distinct(p.col.records())) }

// flowing waits until n more events than now have arrived.
func (p *procChaos) flowing(what string, n int) {
	p.t.Helper()
	from := p.delivered()
	waitFor(p.t, 60*time.Second, what, func() (bool, string) {
		got := p.delivered()
		return got >= from+n, fmt.Sprintf("%d delivered (%d before)", got, from)
	})
}

// finish stops the producer, waits for every row, and checks the ledger.
func (p *procChaos) finish(procs []*relayProcess) eventledger.Report {
	p.t.Helper()
	p.stop()
	p.t.Cleanup(func() {
		if p.t.Failed() {
			p.dump(procs)
		}
	})
	rep := settle(p.t, p.pool, p.l, p.col, int(p.rows.Load()), 90*time.Second)
	for _, pr := range procs {
		pr.checkOutput(p.t)
	}
	return rep
}

// dump logs, for a run that failed, the leases as the database has them
// and the last lines of each process still running.
func (p *procChaos) dump(procs []*relayProcess) {
	rows, err := p.pool.Query(context.Background(), "SELECT shard, owner, term, expires_at > now(), unended::text FROM outbox_relay.leases ORDER BY shard")
	if err == nil {
		for rows.Next() {
			var shard, owner, unended string
			var term int64
			var live bool
			if rows.Scan(&shard, &owner, &term, &live, &unended) == nil {
				p.t.Logf("lease %s: owner %s term %d live %v unended %s", shard, owner, term, live, unended)
			}
		}
		rows.Close()
	}
	for _, pr := range procs {
		if pr.exited() {
			continue
		}
		lines := strings.Split(strings.TrimSpace(pr.out.String()), "\n")
		p.t.Logf("pid %d, its last lines:\n%s", pr.cmd.Process.Pid, strings.Join(lines[max(len(lines)-25, 0):], "\n"))
	}
}

// holderPID is the pid of the process holding the source's lease (owners
// are host/pid/nonce), or 0 when none does.
func (p *procChaos) holderPID() (pid int, term int64) {
	var owner string
	_ = p.pool.QueryRow(context.Background(), "SELECT owner, term FROM outbox_relay.leases WHERE shard = 'chaos' AND expires_at > now()").Scan(&owner, &term)
	parts := strings.Split(owner, "/")
	if len(parts) != 3 {
		return 0, term
	}
	pid, _ = strconv.Atoi(parts[1])
	return pid, term
}

// TestChaosKillAtEveryStep guards at-least-once delivery through crashes:
// the relay is killed with SIGKILL while it publishes (a produce request
// reached the broker), while a claim is open (its transaction idle between
// claim and commit), and at random moments, and restarted each time. A
// batch published but not committed is published again (duplicates,
// bounded); nothing is lost; order holds on first delivery.
func TestChaosKillAtEveryStep(t *testing.T) {
	t.Parallel()
	kills := 6
	if chaosFull() {
		kills = 30
	}
	p := newProcChaos(t, "1s", 50)
	procs := killAtSteps(t, p, kills, []string{"publish", "claim", "random"})
	rep := p.finish(procs)
	bound := kills * 3 * 50 // pipeline x batch per kill
	t.Logf("%d kills: %s (duplicate bound %d)", kills, rep, bound)
	if !rep.OK() || rep.Duplicates > bound {
		t.Error(rep)
	}
}

// killAtSteps runs the relay and SIGKILLs it kills times, at the steps in
// turn, restarting it each time: "publish" (a produce request reached the
// broker), "end of transaction" (an EndTxn did), "claim" (a claim's
// transaction is open) and "random". It returns every process it started.
func killAtSteps(t *testing.T, p *procChaos, kills int, steps []string) []*relayProcess {
	t.Helper()
	seen := map[kmsg.Key]chan struct{}{kmsg.Produce: make(chan struct{}, 1), kmsg.EndTxn: make(chan struct{}, 1)}
	for key, ch := range seen {
		p.cluster.Fault(kfake.Fault{Keys: []kmsg.Key{key}, Observe: true, Count: -1, When: func(kmsg.Request) bool {
			select {
			case ch <- struct{}{}:
			default:
			}
			return true
		}})
	}
	proc := p.start()
	procs := []*relayProcess{proc}
	for k := range kills {
		p.flowing(fmt.Sprintf("events flowing before kill %d", k+1), 200)
		step := steps[k%len(steps)]
		switch step {
		case "publish", "end of transaction":
			ch := seen[kmsg.Produce]
			if step != "publish" {
				ch = seen[kmsg.EndTxn]
			}
			for len(ch) > 0 {
				<-ch
			}
			select {
			case <-ch:
			case <-time.After(30 * time.Second):
				t.Fatalf("no %s", step)
			}
		case "claim":
			waitFor(t, 30*time.Second, "a claim open", func() (bool, string) {
				var n int
				_ = p.pool.QueryRow(context.Background(), `SELECT count(*) FROM pg_stat_activity
WHERE application_name LIKE 'outbox-relay %' AND state = 'idle in transaction'`).Scan(&n)
				return n > 0, "none"
			})
		case "random":
			time.Sleep(time.Duration(rand.N(100)) * time.Millisecond) // a random moment: the point of this step
		}
		before := p.delivered()
		proc.kill(t)
		t.Logf("kill %d during %s: %d events delivered", k+1, step, before)
		proc = p.start()
		procs = append(procs, proc)
	}
	p.flowing("events flowing after the last restart", 200)
	return procs
}

// TestChaosFrozenHolder guards the fenced hand-over: the lease holder is
// frozen (SIGSTOP) with batches in flight, past its lease; the other
// replica takes the source over, ends the frozen holder's claims, and
// relays on; then the frozen one resumes (SIGCONT) and must complete
// nothing (its completions check the lease term) and stop. Order holds on
// first delivery and nothing is lost.
func TestChaosFrozenHolder(t *testing.T) {
	t.Parallel()
	freezes := 4
	if chaosFull() {
		freezes = 12
	}
	p := newProcChaos(t, "1s", 50)
	rep := p.finish(freezeHolders(t, p, freezes))
	t.Logf("%d freezes: %s", freezes, rep)
	if !rep.OK() {
		t.Error(rep)
	}
}

// freezeHolders runs two relays and freezes the lease holder past its
// lease freezes times (see freezeHolder), waiting each time for the
// resumed one to find its lease lost and starting a replacement. It
// returns every process it started.
func freezeHolders(t *testing.T, p *procChaos, freezes int) []*relayProcess {
	t.Helper()
	procs := []*relayProcess{p.start(), p.start()}
	for f := range freezes {
		frozen := freezeHolder(t, f+1, procs, p.holderPID, p.flowing)
		// The resumed process finds its lease lost; a replacement keeps
		// two relays running.
		// It stops either at its trust window (no renewal for half the
		// TTL: it was frozen longer) or when a renewal finds the lease
		// taken, whichever it sees first.
		waitFor(t, 30*time.Second, "the resumed holder to notice its lease is lost", func() (bool, string) {
			out := frozen.out.String()
			return strings.Contains(out, "lease lost") || strings.Contains(out, "lease could not be renewed"), "not yet"
		})
		procs = append(procs, p.start())
	}
	return procs
}

// freezeHolder freezes (SIGSTOP) the process of procs that holds the
// lease (holder gives its pid and term), once events flow; waits until
// another process has taken the lease over and events flow under it;
// resumes it (SIGCONT) and returns it.
func freezeHolder(t *testing.T, n int, procs []*relayProcess, holder func() (int, int64), flowing func(string, int)) *relayProcess {
	t.Helper()
	flowing(fmt.Sprintf("events flowing before freeze %d", n), 200)
	pid, term := holder()
	var frozen *relayProcess
	for _, pr := range procs {
		if !pr.exited() && pr.cmd.Process.Pid == pid {
			frozen = pr
		}
	}
	if frozen == nil {
		t.Fatalf("freeze %d: the holder (pid %d) is none of the running relays", n, pid)
	}
	if err := syscall.Kill(pid, syscall.SIGSTOP); err != nil {
		t.Fatal(err)
	}
	waitFor(t, 30*time.Second, "another replica to take the source over", func() (bool, string) {
		newPID, newTerm := holder()
		return newPID != 0 && newPID != pid && newTerm > term, fmt.Sprintf("holder %d term %d", newPID, newTerm)
	})
	flowing(fmt.Sprintf("events flowing under the new holder %d", n), 200)
	if err := syscall.Kill(pid, syscall.SIGCONT); err != nil {
		t.Fatal(err)
	}
	t.Logf("freeze %d: holder %d frozen past its lease (term %d), taken over, resumed", n, pid, term)
	return frozen
}

// TestChaosReplicas guards one holder per source with many replicas and
// crashes: three relays, one killed at random and replaced again and
// again while rows flow. Nothing is lost, order holds on first delivery,
// duplicates stay within what the killed processes had in flight.
func TestChaosReplicas(t *testing.T) {
	t.Parallel()
	kills, keys := 4, 100
	if chaosFull() {
		kills, keys = 20, 1000
	}
	p := newProcChaos(t, "1s", keys)
	procs := []*relayProcess{p.start(), p.start(), p.start()}
	running := append([]*relayProcess(nil), procs...)
	for k := range kills {
		p.flowing(fmt.Sprintf("events flowing before kill %d", k+1), 300)
		// A burst of backlog on keys of its own: every replica that
		// believes it holds the source would claim from it at once.
		burst := 1000
		fillChaos(t, p.pool, p.l, "orders", "b", burst, 20, k*burst)
		p.rows.Add(int64(burst))
		i := rand.N(len(running))
		pid, _ := p.holderPID()
		running[i].kill(t)
		t.Logf("kill %d: pid %d (the holder: %v)", k+1, running[i].cmd.Process.Pid, running[i].cmd.Process.Pid == pid)
		running[i] = p.start()
		procs = append(procs, running[i])
	}
	p.flowing("events flowing after the last kill", 300)
	rep := p.finish(procs)
	bound := kills * 3 * 50
	t.Logf("3 replicas, %d kills, %d keys: %s (duplicate bound %d)", kills, keys, rep, bound)
	if !rep.OK() || rep.Duplicates > bound {
		t.Error(rep)
	}
}
