package e2e

import (
	"context"
	"fmt"
	"net"
	"os"
	"os/exec"
	"os/user"
	"path/filepath"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/jackc/pgx/v5/pgxpool"
	"github.com/twmb/franz-go/pkg/kfake"

	"github.com/outbox-relay/outbox-relay/internal/config"
	eventledger "github.com/outbox-relay/outbox-relay/internal/ledger"
	"github.com/outbox-relay/outbox-relay/internal/mytest"
	"github.com/outbox-relay/outbox-relay/internal/sink/sinktest"
)

const pgBin = "/usr/lib/postgresql/15/bin"

// privatePostgres is a PostgreSQL server of the test's own, which it may
// restart and crash without touching the shared one.
type privatePostgres struct {
	t    *testing.T
	dir  string
	port int
}

// startPrivatePostgres initialises and starts a server as the postgres
// user (the server refuses to run as root); it is stopped and removed when
// the test ends.
func startPrivatePostgres(t *testing.T) *privatePostgres {
	t.Helper()
	if _, err := os.Stat(filepath.Join(pgBin, "pg_ctl")); err != nil {
		t.Skipf("PostgreSQL's server binaries are not in %s", pgBin)
	}
	pgUser, err := user.Lookup("postgres")
	if err != nil {
		t.Skipf("no postgres user to run a private server as: %v", err)
	}
	uid, _ := strconv.Atoi(pgUser.Uid)
	gid, _ := strconv.Atoi(pgUser.Gid)
	dir, err := os.MkdirTemp("", "outbox-relay-pg-")
	if err != nil {
		t.Fatal(err)
	}
	if err := os.Chmod(dir, 0o755); err != nil {
		t.Fatal(err)
	}
	if err := os.Chown(dir, uid, gid); err != nil {
		t.Fatal(err)
	}
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	p := &privatePostgres{t: t, dir: dir, port: ln.Addr().(*net.TCPAddr).Port}
	_ = ln.Close()
	p.run("initdb", "-D", p.data(), "-A", "trust", "-U", "postgres", "--no-sync", "-E", "UTF8")
	t.Cleanup(func() {
		_ = p.command("pg_ctl", "-D", p.data(), "stop", "-m", "immediate", "-w").Run()
		_ = os.RemoveAll(dir)
	})
	p.ctl("start")
	return p
}

func (p *privatePostgres) data() string { return filepath.Join(p.dir, "data") }

func (p *privatePostgres) dsn() string {
	return fmt.Sprintf("postgres://postgres@127.0.0.1:%d/postgres?sslmode=disable", p.port)
}

func (p *privatePostgres) command(bin string, args ...string) *exec.Cmd {
	return exec.Command("runuser", append([]string{"-u", "postgres", "--", filepath.Join(pgBin, bin)}, args...)...)
}

func (p *privatePostgres) run(bin string, args ...string) {
	p.t.Helper()
	if out, err := p.command(bin, args...).CombinedOutput(); err != nil {
		p.t.Fatalf("%s %v: %v\n%s", bin, args, err, out)
	}
}

// ctl runs pg_ctl with action (start, restart, stop) and extra arguments.
func (p *privatePostgres) ctl(action string, args ...string) {
	p.t.Helper()
	opts := fmt.Sprintf("-p %d -k %s -c listen_addresses=127.0.0.1 -c fsync=off -c max_connections=50", p.port, p.dir)
	p.run("pg_ctl", append([]string{"-D", p.data(), "-o", opts, "-l", filepath.Join(p.dir, "log"), "-w", action}, args...)...)
}

// TestChaosPostgresRestart guards the relay through its database going
// away: PostgreSQL is restarted (fast shutdown) and crashed (immediate
// shutdown, recovery at start) while a backlog drains. Claims in flight are
// rolled back by the server, their rows pending again; the relay reconnects
// and goes on: nothing lost, order on first delivery kept.
func TestChaosPostgresRestart(t *testing.T) {
	t.Parallel()
	rows := 6000
	if chaosFull() {
		rows = 60000
	}
	pg := startPrivatePostgres(t)
	ctx := context.Background()
	pool, err := pgxpool.New(ctx, pg.dsn())
	if err != nil {
		t.Fatal(err)
	}
	defer pool.Close()
	if _, err := pool.Exec(ctx, chaosTable); err != nil {
		t.Fatal(err)
	}
	l := eventledger.New()
	fillChaos(t, pool, l, "orders", "k", rows, 100, 0)
	c := kafkaCluster(t, kfake.SeedTopics(4, "orders"))
	col := collect(t, c.ListenAddrs(), "orders")
	cfg := baseConfig(pg.dsn(), c.ListenAddrs(), chaosSource(50, 2))
	runRelay(t, cfg)
	modes := []string{"fast", "immediate"}
	asDrainProgresses(t, rows, len(modes), countPublished(pool), "restart", func(i int) {
		pg.ctl("restart", "-m", modes[i-1])
		t.Logf("PostgreSQL restarted (%s shutdown) once %d of %d rows were published", modes[i-1], rows*i/3, rows)
	})
	rep := settle(t, pool, l, col, rows, 120*time.Second)
	t.Logf("%d rows, a fast restart and a crash of PostgreSQL: %s", rows, rep)
	if !rep.OK() {
		t.Error(rep)
	}
}

// TestChaosMariaDBCut is TestChaosDatabaseCut on MariaDB with seed 004's
// kafka_outbox: the connection cut again and again while a backlog drains.
func TestChaosMariaDBCut(t *testing.T) {
	t.Parallel()
	rows, cuts := 3000, 6
	if chaosFull() {
		rows, cuts = 30000, 40
	}
	ctx := context.Background()
	name, dsn := mytest.NewDatabase(t, "chaos_cut")
	host := strings.SplitN(strings.SplitN(dsn, "tcp(", 2)[1], ")", 2)[0]
	proxy := sinktest.NewProxy(t, host)
	c := kafkaCluster(t, kfake.SeedTopics(4, "orders"))
	col := collect(t, c.ListenAddrs(), "orders")
	cfg := mysqlConfig(t, strings.Replace(dsn, "tcp("+host+")", "tcp("+proxy.Addr()+")", 1), c.ListenAddrs(),
		config.Source{Name: "chaos", Table: name + ".kafka_outbox", Preset: "kafka-outbox", BatchSize: 50, Pipeline: 3})
	runApp(t, cfg) // creates the table
	db := openMySQL(t, dsn)
	l := eventledger.New()
	for start := 0; start < rows; start += 500 {
		var b strings.Builder
		b.WriteString("INSERT INTO kafka_outbox (topic, `key`, payload_json) VALUES ")
		for i := start; i < start+500 && i < rows; i++ {
			if i > start {
				b.WriteString(", ")
			}
			fmt.Fprintf(&b, "('orders', 'k%d', '{\"n\": %d}')", i%100, i)
		}
		res, err := db.ExecContext(ctx, b.String())
		if err != nil {
			t.Fatal(err)
		}
		first, _ := res.LastInsertId() // a multi-row INSERT gives consecutive ids from the first
		for i := start; i < start+500 && i < rows; i++ {
			l.Commit(strconv.FormatInt(first+int64(i-start), 10), fmt.Sprintf("k%d", i%100))
		}
	}
	published := func() int {
		var n int
		_ = db.QueryRowContext(ctx, "SELECT COUNT(*) FROM kafka_outbox WHERE push_completed_at IS NOT NULL").Scan(&n)
		return n
	}
	asDrainProgresses(t, rows, cuts, published, "cut", func(int) { proxy.Cut(200 * time.Millisecond) })
	waitFor(t, 90*time.Second, "every row delivered and marked", func() (bool, string) {
		n := published()
		got := len(distinct(col.records()))
		return n == rows && got >= rows, fmt.Sprintf("%d marked, %d delivered of %d", n, got, rows)
	})
	for _, r := range col.records() {
		id, _ := header(r, "event_id")
		l.Deliver(id)
	}
	rep := l.Check(nil)
	t.Logf("MariaDB: %d rows, %d connection cuts: %s", rows, cuts, rep)
	if !rep.OK() {
		t.Error(rep)
	}
}
