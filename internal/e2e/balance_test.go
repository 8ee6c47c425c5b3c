package e2e

import (
	"context"
	"fmt"
	"maps"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/twmb/franz-go/pkg/kfake"

	"github.com/outbox-relay/outbox-relay/internal/mytest"
	"github.com/outbox-relay/outbox-relay/internal/pgtest"
)

// TestReplicasShareTheSources: relay processes share a database's sources
// (12 here) as the issue of scaling out asks: three replicas hold 4 each
// within 10 s of their start; a fourth takes its share (3 each) within
// 10 s; one that stops with SIGTERM hands its sources over within a second;
// one killed with SIGKILL is replaced within the lease TTL. On PostgreSQL
// the replicas are told through NOTIFY, on MariaDB through their bells.
func TestReplicasShareTheSources(t *testing.T) {
	t.Parallel()
	t.Run("postgres", func(t *testing.T) {
		t.Parallel()
		dsn, pool := pgtest.NewDB(t)
		replicasShareTheSources(t, replicaDB{
			schema: "public",
			config: fmt.Sprintf("databases:\n  main: {dsn: %q}\n", dsn),
			exec:   func(ddl string) { pgtest.Exec(t, pool, ddl) },
			owners: func() []string {
				rows, err := pool.Query(context.Background(), `SELECT owner FROM outbox_relay.leases WHERE expires_at > now()`)
				if err != nil {
					return nil // the relays have not made the lease table yet
				}
				owners, _ := pgx.CollectRows(rows, pgx.RowTo[string])
				return owners
			},
		})
	})
	t.Run("mariadb", func(t *testing.T) {
		t.Parallel()
		use, dsn := mytest.NewDatabase(t, "e2e_share")
		relayDB := "relay_" + mytest.Suffix()
		t.Cleanup(func() { mytest.Drop(t, relayDB) })
		db := mytest.Admin(t)
		replicasShareTheSources(t, replicaDB{
			config: fmt.Sprintf("relay_schema: %s\ndatabases:\n  main: {driver: mysql, dsn: %q}\n", relayDB, dsn),
			exec: func(ddl string) {
				mytest.Exec(t, db, strings.Replace(ddl, "CREATE TABLE ", "CREATE TABLE "+use+".", 1))
			},
			owners: func() []string {
				rows, err := db.Query("SELECT owner FROM " + relayDB + ".leases WHERE expires_at > UTC_TIMESTAMP(6)")
				if err != nil {
					return nil
				}
				defer rows.Close()
				var owners []string
				for rows.Next() {
					var o string
					if rows.Scan(&o) == nil {
						owners = append(owners, o)
					}
				}
				return owners
			},
			mysql:  true,
			schema: use,
		})
	})
}

// replicaDB is the database the replicas share, in its dialect.
type replicaDB struct {
	config string           // its databases block (and relay schema)
	exec   func(ddl string) // runs DDL in the application database
	owners func() []string  // the holders of the unexpired leases
	mysql  bool
	schema string // the tables' schema (MySQL: database)
}

func replicasShareTheSources(t *testing.T, rdb replicaDB) {
	const sources, ttl = 12, 15 * time.Second // the default lease_ttl
	bin := buildRelay(t)
	cluster := kafkaCluster(t, kfake.SeedTopics(1, "orders"))
	var cfg strings.Builder
	fmt.Fprintf(&cfg, `log: {level: info, format: text}
admin: {listen: "off"}
shutdown: {timeout: 5s}
lease_ttl: %s
%ssinks:
  kafka: {type: kafka, brokers: [%q]}
sources:
`, ttl, rdb.config, strings.Join(cluster.ListenAddrs(), ","))
	for i := range sources {
		if rdb.mysql {
			rdb.exec(fmt.Sprintf(`CREATE TABLE o%02d (id BIGINT AUTO_INCREMENT PRIMARY KEY, k VARCHAR(64) NOT NULL, payload JSON NOT NULL)`, i))
		} else {
			rdb.exec(fmt.Sprintf(`CREATE TABLE o%02d (id bigserial PRIMARY KEY, k text NOT NULL, payload jsonb NOT NULL)`, i))
		}
		table := fmt.Sprintf("%s.o%02d", rdb.schema, i)
		fmt.Fprintf(&cfg, `  - {name: s%02d, table: %s, topic: orders,
     layout: {id: id, payload: payload, key: "{k}", order_by: id, state: {mode: delete}}}
`, i, table)
	}
	path := filepath.Join(t.TempDir(), "relay.yaml")
	if err := os.WriteFile(path, []byte(cfg.String()), 0o600); err != nil {
		t.Fatal(err)
	}
	heldByPID := func() map[int]int { return byPID(rdb.owners()) }
	shares := func(want map[int]int, within time.Duration, what string) time.Duration {
		t.Helper()
		start := time.Now()
		waitFor(t, within, what, func() (bool, string) {
			got := heldByPID()
			return maps.Equal(got, want), fmt.Sprintf("held by pid: %v, want %v", got, want)
		})
		return time.Since(start)
	}
	pid := func(p *relayProcess) int { return p.cmd.Process.Pid }
	// From the moment a replica runs: building a race-enabled process and
	// migrating take seconds of their own on a loaded machine.
	running := func(ps ...*relayProcess) {
		t.Helper()
		waitFor(t, 60*time.Second, "the replicas running", func() (bool, string) {
			for _, p := range ps {
				if p.exited() {
					t.Fatalf("relay process %d exited: %v\n%s", pid(p), p.err, p.out.String())
				}
				if !strings.Contains(p.out.String(), "relay starting") {
					return false, fmt.Sprintf("pid %d not started", pid(p))
				}
			}
			return true, ""
		})
	}
	a, b, c := startRelay(t, bin, path), startRelay(t, bin, path), startRelay(t, bin, path)
	running(a, b, c)
	took := shares(map[int]int{pid(a): 4, pid(b): 4, pid(c): 4}, 10*time.Second, "three replicas hold 4 each")
	t.Logf("three replicas: 4 each %v after they all run", took.Round(time.Millisecond))

	d := startRelay(t, bin, path)
	running(d)
	took = shares(map[int]int{pid(a): 3, pid(b): 3, pid(c): 3, pid(d): 3}, 10*time.Second, "a fourth takes its share")
	t.Logf("a fourth replica: 3 each %v after it runs", took.Round(time.Millisecond))
	// status lists the replicas with their holds and share.
	out, _ := exec.Command(bin, "status", "--config", path).CombinedOutput() // exits 1 while sources have no record yet
	_, reps, ok := strings.Cut(string(out), "DATABASE")
	if lines := strings.Split(strings.TrimSpace(reps), "\n"); !ok || len(lines) != 5 {
		t.Fatalf("status shows no table of the four replicas:\n%s", out)
	} else {
		for _, l := range lines[1:] {
			if f := strings.Fields(l); len(f) != 5 || f[0] != "main" || f[3] != "3" || f[4] != "3" {
				t.Errorf("status: replica line %q, want database main, holds 3, share 3", l)
			}
		}
	}

	if err := c.cmd.Process.Signal(syscall.SIGTERM); err != nil {
		t.Fatal(err)
	}
	sent := time.Now()
	waitFor(t, 10*time.Second, "the stopped replica's sources held by the others", func() (bool, string) {
		got := heldByPID()
		n := 0
		for p, held := range got {
			if p != pid(c) {
				n += held
			}
		}
		return n == sources && got[pid(c)] == 0, fmt.Sprintf("held by pid: %v", got)
	})
	// PostgreSQL tells the successor through NOTIFY, MySQL rings its bell
	// (a ring that comes between two of its waits is counted and heard at
	// the next): within a second either way.
	if took := time.Since(sent); took > time.Second {
		t.Errorf("a replica stopped with SIGTERM: its sources taken %v after the signal, want within 1s", took)
	} else {
		t.Logf("SIGTERM: sources taken %v after the signal", took.Round(time.Millisecond))
	}
	if ws := c.wait(t, 10*time.Second); !ws.Exited() || ws.ExitStatus() != 0 {
		t.Fatalf("the stopped replica: %v\n%s", ws, c.out.String())
	}
	took = shares(map[int]int{pid(a): 4, pid(b): 4, pid(d): 4}, 10*time.Second, "three left share again")
	t.Logf("three left: 4 each %v later", took.Round(time.Millisecond))

	d.kill(t)
	killed := time.Now()
	shares(map[int]int{pid(a): 6, pid(b): 6}, ttl+5*time.Second, "a killed replica's sources held by the others")
	if took := time.Since(killed); took > ttl {
		t.Errorf("a replica killed with SIGKILL: its sources taken %v after, want within the lease TTL %v", took, ttl)
	} else {
		t.Logf("SIGKILL: sources taken %v after the kill", took.Round(time.Millisecond))
	}
	for _, p := range []*relayProcess{a, b, c, d} {
		p.checkOutput(t)
	}
}

// byPID counts leases per holding process (owners are host/pid/nonce).
func byPID(owners []string) map[int]int {
	out := map[int]int{}
	for _, o := range owners {
		parts := strings.Split(o, "/")
		pid, _ := strconv.Atoi(parts[min(1, len(parts)-1)])
		out[pid]++
	}
	return out
}
