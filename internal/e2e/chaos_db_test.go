package e2e

import (
	"bytes"
	"context"
	"database/sql"
	"encoding/binary"
	"fmt"
	"log/slog"
	"net"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/jackc/pgx/v5/pgxpool"
	"github.com/twmb/franz-go/pkg/kfake"
	"github.com/twmb/franz-go/pkg/kmsg"

	"github.com/outbox-relay/outbox-relay/internal/app"
	"github.com/outbox-relay/outbox-relay/internal/config"
	eventledger "github.com/outbox-relay/outbox-relay/internal/ledger"
	"github.com/outbox-relay/outbox-relay/internal/mytest"
	"github.com/outbox-relay/outbox-relay/internal/pgtest"
)

// Phases of a claim at which a dbTap cuts the connections.
const (
	// phaseClaim: the claim statement has run on the server (its rows
	// are locked in the claim's transaction) and its answer is lost.
	phaseClaim = "claim"
	// phasePublish: a claimed batch is being published (its Kafka produce
	// request is held by the broker meanwhile); the claim's transaction is
	// open and the batch cannot complete on its connection.
	phasePublish = "publish"
	// phaseCommit: the COMMIT of a transaction that holds a claim has run
	// on the server (the batch is complete there) and its answer is lost:
	// the relay cannot know the outcome.
	phaseCommit = "commit"
)

// dbTap forwards TCP connections to a database server, as sinktest.Proxy
// does, and reads what the relay sends on each: it knows the claim
// statement (it contains marker) and the COMMIT or ROLLBACK that ends a
// claim's transaction. Armed with a phase, it lets the next such statement
// reach the server, waits for the server's answer, drops it and cuts every
// connection, then refuses new ones for a moment. proto is "pg" (the
// PostgreSQL wire protocol) or "mysql".
type dbTap struct {
	t        *testing.T
	ln       net.Listener
	upstream string
	proto    string
	marker   string
	refuse   time.Duration
	// hook, when set, runs once the answer is held and before the cut
	// (the restart scenario restarts the server there).
	hook func(phase string)

	mu     sync.Mutex
	conns  map[net.Conn]bool
	tapped map[*tapConn]bool
	until  time.Time
	// open is the claims open on the connections at each cut.
	open   []int
	armed  string      // the phase to cut at next, or ""
	fired  chan string // the phase of each cut made
	claims atomic.Int64
}

func newDBTap(t *testing.T, proto, upstream, marker string) *dbTap {
	t.Helper()
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	p := &dbTap{t: t, ln: ln, upstream: upstream, proto: proto, marker: marker, refuse: 200 * time.Millisecond,
		conns: map[net.Conn]bool{}, tapped: map[*tapConn]bool{}, fired: make(chan string, 1)}
	go p.serve()
	t.Cleanup(func() { _ = ln.Close(); p.cut() })
	return p
}

func (p *dbTap) addr() string { return p.ln.Addr().String() }

// cutAt arms the tap for phase and waits until it has cut there.
func (p *dbTap) cutAt(phase string, timeout time.Duration) {
	p.t.Helper()
	p.mu.Lock()
	p.armed = phase
	p.mu.Unlock()
	select {
	case got := <-p.fired:
		if got != phase {
			p.t.Fatalf("cut at %s, armed for %s", got, phase)
		}
	case <-time.After(timeout):
		p.mu.Lock()
		p.armed = ""
		p.mu.Unlock()
		p.t.Fatalf("no %s seen within %v to cut at", phase, timeout)
	}
}

// strike counts the claims open, runs the hook, then cuts.
func (p *dbTap) strike(phase string) {
	p.mu.Lock()
	open := 0
	for tc := range p.tapped {
		if tc.claimOpen.Load() {
			open++
		}
	}
	p.open = append(p.open, open)
	p.mu.Unlock()
	if p.hook != nil {
		p.hook(phase)
	}
	p.cut()
}

// cut closes every connection and refuses new ones for p.refuse.
func (p *dbTap) cut() {
	p.mu.Lock()
	defer p.mu.Unlock()
	p.until = time.Now().Add(p.refuse)
	for c := range p.conns {
		_ = c.Close()
	}
}

func (p *dbTap) serve() {
	for {
		c, err := p.ln.Accept()
		if err != nil {
			return
		}
		go p.forward(c)
	}
}

// tapConn is one relayed connection's state.
type tapConn struct {
	claimOpen atomic.Bool     // a claim's transaction is open
	claimStmt map[string]bool // PostgreSQL: prepared statements that are the claim
	// commitStmt are the prepared statements that are a COMMIT: a
	// completion sends its COMMIT in its pipeline, extended protocol.
	commitStmt map[string]bool
	buf        []byte // the client's bytes not yet parsed
	started    bool   // past the startup message / handshake response
	trip       atomic.Pointer[string]
}

func (p *dbTap) forward(client net.Conn) {
	p.mu.Lock()
	refused := time.Now().Before(p.until)
	p.mu.Unlock()
	if refused {
		_ = client.Close()
		return
	}
	server, err := net.DialTimeout("tcp", p.upstream, 5*time.Second)
	if err != nil {
		_ = client.Close()
		return
	}
	p.mu.Lock()
	if time.Now().Before(p.until) {
		p.mu.Unlock()
		_ = client.Close()
		_ = server.Close()
		return
	}
	tc := &tapConn{claimStmt: map[string]bool{}, commitStmt: map[string]bool{}}
	p.conns[client], p.conns[server], p.tapped[tc] = true, true, true
	p.mu.Unlock()
	defer func() {
		p.mu.Lock()
		delete(p.conns, client)
		delete(p.conns, server)
		delete(p.tapped, tc)
		p.mu.Unlock()
		_ = client.Close()
		_ = server.Close()
	}()
	done := make(chan struct{}, 2)
	go func() { // client to server: parsed, then forwarded
		defer func() { done <- struct{}{} }()
		buf := make([]byte, 64<<10)
		for {
			n, err := client.Read(buf)
			if n > 0 {
				if phase := p.scan(tc, buf[:n]); phase != "" {
					tc.trip.Store(&phase)
				}
				if _, werr := server.Write(buf[:n]); werr != nil {
					return
				}
			}
			if err != nil {
				return
			}
		}
	}()
	go func() { // server to client: the answer to a tripped statement is held, then the cut
		defer func() { done <- struct{}{} }()
		buf := make([]byte, 64<<10)
		for {
			n, err := server.Read(buf)
			if n > 0 {
				if phase := tc.trip.Swap(nil); phase != nil {
					p.strike(*phase)
					p.fired <- *phase
					return
				}
				if _, werr := client.Write(buf[:n]); werr != nil {
					return
				}
			}
			if err != nil {
				return
			}
		}
	}()
	<-done
}

// scan parses the client's bytes and returns the armed phase when they
// hold the statement it waits for (the tap is then disarmed).
func (p *dbTap) scan(tc *tapConn, b []byte) string {
	tc.buf = append(tc.buf, b...)
	var events []string // "claim", "commit", "end"
	for {
		msg, rest, ok := p.next(tc)
		if !ok {
			break
		}
		tc.buf = rest
		if e := p.classify(tc, msg); e != "" {
			events = append(events, e)
		}
	}
	hit := ""
	for _, e := range events {
		switch e {
		case phaseClaim:
			tc.claimOpen.Store(true)
			p.claims.Add(1)
			if hit == "" && p.take(phaseClaim) {
				hit = phaseClaim
			}
		case phaseCommit:
			if tc.claimOpen.Load() && hit == "" && p.take(phaseCommit) {
				hit = phaseCommit
			}
			tc.claimOpen.Store(false)
		case "end":
			tc.claimOpen.Store(false)
		}
	}
	return hit
}

// take disarms the tap if it is armed for phase.
func (p *dbTap) take(phase string) bool {
	p.mu.Lock()
	defer p.mu.Unlock()
	if p.armed != phase {
		return false
	}
	p.armed = ""
	return true
}

// next splits one client message off tc.buf.
func (p *dbTap) next(tc *tapConn) (msg, rest []byte, ok bool) {
	b := tc.buf
	if p.proto == "pg" {
		if !tc.started { // the startup message: length, then the rest, no type byte
			if len(b) < 4 {
				return nil, b, false
			}
			n := int(binary.BigEndian.Uint32(b))
			if len(b) < n {
				return nil, b, false
			}
			tc.started = true
			return nil, b[n:], true
		}
		if len(b) < 5 {
			return nil, b, false
		}
		n := 1 + int(binary.BigEndian.Uint32(b[1:]))
		if len(b) < n {
			return nil, b, false
		}
		return b[:n], b[n:], true
	}
	if len(b) < 4 {
		return nil, b, false
	}
	n := 4 + (int(b[0]) | int(b[1])<<8 | int(b[2])<<16)
	if len(b) < n {
		return nil, b, false
	}
	if !tc.started { // the handshake response
		tc.started = true
		return nil, b[n:], true
	}
	return b[4:n], b[n:], true
}

// classify names what a client message does to a claim.
func (p *dbTap) classify(tc *tapConn, msg []byte) string {
	if msg == nil {
		return ""
	}
	var text string
	if p.proto == "pg" {
		body := msg[5:]
		switch msg[0] {
		case 'Q':
			text = cstring(body)
		case 'P': // Parse: statement name, query
			name := cstring(body)
			query := cstring(body[len(name)+1:])
			if strings.Contains(query, p.marker) {
				tc.claimStmt[name] = true
				if name == "" {
					return phaseClaim
				}
			}
			if strings.EqualFold(strings.TrimSpace(query), "commit") {
				tc.commitStmt[name] = true
				if name == "" {
					return phaseCommit
				}
			}
			return ""
		case 'B': // Bind: portal, statement
			portal := cstring(body)
			stmt := cstring(body[len(portal)+1:])
			switch {
			case stmt != "" && tc.claimStmt[stmt]:
				return phaseClaim
			case stmt != "" && tc.commitStmt[stmt]:
				return phaseCommit
			}
			return ""
		default:
			return ""
		}
	} else {
		if len(msg) == 0 || msg[0] != 0x03 { // COM_QUERY
			return ""
		}
		text = string(msg[1:])
	}
	switch t := strings.ToLower(strings.TrimSpace(text)); {
	case strings.Contains(text, p.marker):
		return phaseClaim
	case t == "commit":
		return phaseCommit
	case t == "rollback":
		return "end"
	}
	return ""
}

func cstring(b []byte) string {
	if i := bytes.IndexByte(b, 0); i >= 0 {
		return string(b[:i])
	}
	return string(b)
}

// countingHandler counts the relay's log records by message, and passes
// them on.
type countingHandler struct {
	slog.Handler
	mu *sync.Mutex
	n  map[string]int
}

func (h countingHandler) Handle(ctx context.Context, r slog.Record) error {
	h.mu.Lock()
	h.n[r.Message]++
	h.mu.Unlock()
	return h.Handler.Handle(ctx, r)
}

func (h countingHandler) WithAttrs(as []slog.Attr) slog.Handler {
	return countingHandler{h.Handler.WithAttrs(as), h.mu, h.n}
}

func (h countingHandler) WithGroup(g string) slog.Handler {
	return countingHandler{h.Handler.WithGroup(g), h.mu, h.n}
}

// watchedRelay is a relay run in this process whose exit is noticed.
type watchedRelay struct {
	a      *app.App
	done   chan error
	mu     sync.Mutex
	counts map[string]int
}

// count is how many log records said msg.
func (r *watchedRelay) count(msg string) int {
	r.mu.Lock()
	defer r.mu.Unlock()
	return r.counts[msg]
}

// running fails the test if the relay has returned.
func (r *watchedRelay) running(t *testing.T) {
	t.Helper()
	select {
	case err := <-r.done:
		t.Fatalf("the relay exited: %v", err)
	default:
	}
}

// runWatched runs the relay like runApp, counting its log records.
func runWatched(t *testing.T, cfg *config.Config) *watchedRelay {
	t.Helper()
	if err := cfg.Validate(); err != nil {
		t.Fatal(err)
	}
	r := &watchedRelay{done: make(chan error, 1), counts: map[string]int{}}
	log := slog.New(countingHandler{testLogger(t).Handler(), &r.mu, r.counts})
	ctx, cancel := context.WithCancel(context.Background())
	a, err := app.Open(ctx, cfg, log)
	if err != nil {
		cancel()
		t.Fatal(err)
	}
	if err := a.Migrate(ctx); err != nil {
		cancel()
		a.Close()
		t.Fatal(err)
	}
	r.a = a
	go func() { r.done <- a.Run(ctx) }()
	t.Cleanup(func() {
		cancel()
		select {
		case <-r.done:
		case <-time.After(30 * time.Second):
			t.Error("the relay did not stop within 30s")
		}
		a.Close()
	})
	return r
}

// phaseOf is the phase of cut i (from 1): claim, publish, commit in turn.
func phaseOf(i int) string {
	return []string{phaseCommit, phaseClaim, phasePublish}[i%3]
}

// producerHold holds the broker's next produce request on demand.
type producerHold struct {
	hold atomic.Bool
	held chan struct{}
	wake chan struct{}
}

// holdProduces installs the hold on the cluster.
func holdProduces(c *kfake.Cluster) *producerHold {
	h := &producerHold{held: make(chan struct{}, 1), wake: make(chan struct{}, 1)}
	c.ControlKey(int16(kmsg.Produce), func(kmsg.Request) (kmsg.Response, error, bool) {
		c.KeepControl()
		if h.hold.CompareAndSwap(true, false) {
			h.held <- struct{}{}
			c.SleepControl(func() { <-h.wake })
		}
		return nil, nil, false
	})
	return h
}

// cutsWhileDraining makes n cuts, in turn at a claim, while a batch is
// published and at a commit, each once published() has passed its share
// of the first three quarters of rows: the last quarter keeps claims
// coming for the last cut.
func cutsWhileDraining(t *testing.T, tap *dbTap, h *producerHold, rows, n int, published func() int) map[string]int {
	t.Helper()
	made := map[string]int{}
	asDrainProgresses(t, rows*3/4, n, published, "cut", func(i int) {
		phase := phaseOf(i)
		if phase == phasePublish {
			h.hold.Store(true)
			select {
			case <-h.held:
			case <-time.After(30 * time.Second):
				t.Fatal("no produce request to hold within 30s")
			}
			tap.strike(phasePublish)
			h.wake <- struct{}{}
		} else {
			tap.cutAt(phase, 30*time.Second)
		}
		made[phase]++
	})
	tap.mu.Lock()
	t.Logf("claims open on the relay's connections at each cut: %v", tap.open)
	tap.mu.Unlock()
	return made
}

// checkLedger feeds the deliveries to the ledger, checks it and logs.
func checkLedger(t *testing.T, l *eventledger.Ledger, col *collector, what string) {
	t.Helper()
	for _, r := range col.records() {
		id, _ := header(r, "event_id")
		l.Deliver(id)
	}
	if rep := l.Check(nil); rep.OK() {
		t.Logf("%s: %s", what, rep)
	} else {
		t.Errorf("%s: %s", what, rep)
	}
}

// waitSettled waits until no row is pending and every committed event was
// delivered. It gives up early once no row is pending and no delivery has
// come for 15 s (rows marked but never sent), or at timeout; it then says
// so and the ledger names what is missing.
func waitSettled(t *testing.T, timeout time.Duration, rows int, pending func() (int, error), col *collector) {
	t.Helper()
	deadline := time.Now().Add(timeout)
	var last string
	seen, since := -1, time.Now()
	for time.Now().Before(deadline) {
		p, err := pending()
		got := len(distinct(col.records()))
		if err == nil && p == 0 && got >= rows {
			return
		}
		if got != seen || p != 0 {
			seen, since = got, time.Now()
		} else if time.Since(since) > 15*time.Second {
			t.Errorf("no row pending and no delivery for 15s: %d of %d delivered", got, rows)
			return
		}
		last = fmt.Sprintf("%d pending, %d of %d delivered (%v)", p, got, rows, err)
		time.Sleep(50 * time.Millisecond) // polling pace
	}
	t.Errorf("not settled within %v: %s", timeout, last)
}

// TestChaosDatabaseCutByPhase guards the claim's transaction on
// PostgreSQL: rows are marked published only in the transaction that
// claimed them, committed after the sink acknowledged them (marks committed
// with the claim, before publishing, lose the batch whose COMMIT answer is
// lost), and a batch whose completion fails frees its keys in the relay's
// order book (else the later batches of its keys wait for ever). The
// relay's connections go through a tap that cuts every connection (and
// refuses new ones for 200 ms) at chosen moments while a backlog over many
// keys drains, in turn: right after a claim statement ran on the server
// (its answer lost: its rows must be pending again, not lost); while a
// claimed batch is being published (its produce request held by the
// broker: the completion fails, the batch is sent again); right after the
// COMMIT of a completing transaction ran (its answer lost: the batch is
// marked, the relay believes it failed). The relay must reconnect by itself
// and keep running; the ledger finds no loss, nothing unexpected and no row
// out of order on first delivery (duplicates are counted: at least once).
func TestChaosDatabaseCutByPhase(t *testing.T) {
	t.Parallel()
	start := time.Now()
	rows, cuts := 3000, 6
	if chaosFull() {
		rows, cuts = 30000, 30
	}
	dsn, pool := pgtest.NewDB(t)
	pgtest.Exec(t, pool, chaosTable)
	l := eventledger.New()
	fillChaos(t, pool, l, "orders", "k", rows, 200, 0)
	host := strings.SplitN(strings.SplitN(dsn, "@", 2)[1], "/", 2)[0]
	tap := newDBTap(t, "pg", host, "FOR UPDATE OF o SKIP LOCKED")
	c := kafkaCluster(t, kfake.SeedTopics(4, "orders"))
	hold := holdProduces(c)
	col := collect(t, c.ListenAddrs(), "orders")
	cfg := baseConfig(strings.Replace(dsn, "@"+host+"/", "@"+tap.addr()+"/", 1), c.ListenAddrs(), chaosSource(50, 3))
	cfg.LeaseTTL = config.Duration(3 * time.Second)
	r := runWatched(t, cfg)
	made := cutsWhileDraining(t, tap, hold, rows, cuts, countPublished(pool))
	waitSettled(t, 120*time.Second, rows, func() (int, error) {
		var n int
		err := pool.QueryRow(context.Background(), "SELECT count(*) FROM outbox WHERE NOT published").Scan(&n)
		return n, err
	}, col)
	var dead int
	if err := pool.QueryRow(context.Background(), "SELECT count(*) FROM outbox_relay.failed_events").Scan(&dead); err != nil {
		t.Fatal(err)
	}
	if dead != 0 {
		t.Errorf("%d dead letters; want none", dead)
	}
	r.running(t)
	t.Logf("PostgreSQL: %d rows, %d claims, cuts: %d at a claim, %d while publishing, %d at a commit; the relay logged %d failed claims, %d failed completions; %v",
		rows, tap.claims.Load(), made[phaseClaim], made[phasePublish], made[phaseCommit], r.count("claim failed"),
		r.count("complete batch failed; its rows return to the pending set"), time.Since(start).Round(time.Millisecond))
	checkLedger(t, l, col, fmt.Sprintf("PostgreSQL, %d cuts", cuts))
}

// TestChaosMariaDBCutByPhase is TestChaosDatabaseCutByPhase on MariaDB with
// seed 004's kafka_outbox (the kafka-outbox preset): the claim is a
// transaction with its rows locked FOR UPDATE, completed by the COMMIT that
// sets push_completed_at. Cuts right after a claim ran (answer lost), while
// a claimed batch is published, and right after a completing COMMIT ran
// (answer lost); the same mechanisms are guarded.
func TestChaosMariaDBCutByPhase(t *testing.T) {
	t.Parallel()
	start := time.Now()
	rows, cuts := 3000, 6
	if chaosFull() {
		rows, cuts = 30000, 30
	}
	ctx := context.Background()
	name, dsn := mytest.NewDatabase(t, "chaos_phase")
	host := strings.SplitN(strings.SplitN(dsn, "tcp(", 2)[1], ")", 2)[0]
	tap := newDBTap(t, "mysql", host, "SKIP LOCKED")
	c := kafkaCluster(t, kfake.SeedTopics(4, "orders"))
	hold := holdProduces(c)
	col := collect(t, c.ListenAddrs(), "orders")
	cfg := mysqlConfig(t, strings.Replace(dsn, "tcp("+host+")", "tcp("+tap.addr()+")", 1), c.ListenAddrs(),
		config.Source{Name: "chaos", Table: name + ".kafka_outbox", Preset: "kafka-outbox", BatchSize: 50, Pipeline: 3})
	cfg.LeaseTTL = config.Duration(3 * time.Second)
	db := openMySQL(t, dsn)
	// The relay creates the table: the backlog is written once it exists.
	r := runWatched(t, cfg)
	waitFor(t, 30*time.Second, "the relay to create kafka_outbox", func() (bool, string) {
		var n int
		err := db.QueryRowContext(ctx, "SELECT COUNT(*) FROM information_schema.tables WHERE table_schema = ? AND table_name = 'kafka_outbox'", name).Scan(&n)
		return err == nil && n == 1, fmt.Sprint(n, err)
	})
	l := eventledger.New()
	fillMariaDB(t, db, l, rows, 200)
	published := func() int {
		var n int
		_ = db.QueryRowContext(ctx, "SELECT COUNT(*) FROM kafka_outbox WHERE push_completed_at IS NOT NULL").Scan(&n)
		return n
	}
	made := cutsWhileDraining(t, tap, hold, rows, cuts, published)
	waitSettled(t, 120*time.Second, rows, func() (int, error) {
		var n int
		err := db.QueryRowContext(ctx, "SELECT COUNT(*) FROM kafka_outbox WHERE push_completed_at IS NULL").Scan(&n)
		return n, err
	}, col)
	var dead int
	if err := db.QueryRowContext(ctx, "SELECT COUNT(*) FROM kafka_outbox WHERE errored <> 0").Scan(&dead); err != nil {
		t.Fatal(err)
	}
	var relayDead int
	if err := db.QueryRowContext(ctx, "SELECT COUNT(*) FROM "+cfg.RelaySchema+".failed_events").Scan(&relayDead); err != nil {
		t.Fatal(err)
	}
	if dead+relayDead != 0 {
		t.Errorf("%d rows errored, %d dead letters; want none", dead, relayDead)
	}
	r.running(t)
	t.Logf("MariaDB: %d rows, %d claims, cuts: %d at a claim, %d while publishing, %d at a commit; the relay logged %d failed claims, %d failed completions; %v",
		rows, tap.claims.Load(), made[phaseClaim], made[phasePublish], made[phaseCommit], r.count("claim failed"),
		r.count("complete batch failed; its rows return to the pending set"), time.Since(start).Round(time.Millisecond))
	checkLedger(t, l, col, fmt.Sprintf("MariaDB, %d cuts", cuts))
}

// fillMariaDB commits rows to kafka_outbox over keys k0..k<keys-1>, 500 a
// statement, and records them in the ledger.
func fillMariaDB(t *testing.T, db *sql.DB, l *eventledger.Ledger, rows, keys int) {
	t.Helper()
	for start := 0; start < rows; start += 500 {
		var b strings.Builder
		b.WriteString("INSERT INTO kafka_outbox (topic, `key`, payload_json) VALUES ")
		for i := start; i < start+500 && i < rows; i++ {
			if i > start {
				b.WriteString(", ")
			}
			fmt.Fprintf(&b, "('orders', 'k%d', '{\"n\": %d}')", i%keys, i)
		}
		res, err := db.ExecContext(context.Background(), b.String())
		if err != nil {
			t.Fatal(err)
		}
		first, _ := res.LastInsertId() // a multi-row INSERT gives consecutive ids from the first
		for i := start; i < start+500 && i < rows; i++ {
			l.Commit(strconv.FormatInt(first+int64(i-start), 10), fmt.Sprintf("k%d", i%keys))
		}
	}
}

// TestChaosPostgresRestartByPhase guards the relay through a real restart
// of its database, on a private PostgreSQL 15 server: the server is
// restarted (fast shutdown) and crashed (immediate shutdown, recovery at
// start) at chosen moments while a backlog drains: with a claim's rows
// locked and its answer not yet delivered, while a claimed batch is being
// published, and with a completing COMMIT applied but its answer not yet
// delivered. Every connection of the relay is lost each time; it must
// reconnect by itself, keep running, and finish with nothing lost and no
// row out of order on first delivery. It guards what the cut scenarios
// guard, through a server that really goes away (fast shutdown) or crashes
// and recovers (immediate).
func TestChaosPostgresRestartByPhase(t *testing.T) {
	t.Parallel()
	start := time.Now()
	rows, restarts := 4000, 6
	if chaosFull() {
		rows, restarts = 40000, 18
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
	fillChaos(t, pool, l, "orders", "k", rows, 200, 0)
	tap := newDBTap(t, "pg", fmt.Sprintf("127.0.0.1:%d", pg.port), "FOR UPDATE OF o SKIP LOCKED")
	// Modes in turn: fast (sessions terminated, a checkpoint), immediate
	// (a crash: the server recovers from its WAL at start).
	// The hook runs on the tap's goroutine; what it records is read after
	// the cut it precedes is reported.
	modes := map[string]int{}
	var n int
	var restartErrs []string
	tap.hook = func(phase string) {
		mode := "fast" // each phase in turn, then the same with a crash
		if n/3%2 == 1 {
			mode = "immediate"
		}
		n++
		opts := fmt.Sprintf("-p %d -k %s -c listen_addresses=127.0.0.1 -c fsync=off -c max_connections=50", pg.port, pg.dir)
		out, err := pg.command("pg_ctl", "-D", pg.data(), "-o", opts, "-l", pg.dir+"/log", "-w", "restart", "-m", mode).CombinedOutput()
		if err != nil {
			restartErrs = append(restartErrs, fmt.Sprintf("%s: %v: %s", mode, err, out))
		}
		modes[phase+"/"+mode]++
	}
	c := kafkaCluster(t, kfake.SeedTopics(4, "orders"))
	hold := holdProduces(c)
	col := collect(t, c.ListenAddrs(), "orders")
	cfg := baseConfig(strings.Replace(pg.dsn(), fmt.Sprintf("127.0.0.1:%d", pg.port), tap.addr(), 1), c.ListenAddrs(), chaosSource(50, 3))
	cfg.LeaseTTL = config.Duration(3 * time.Second)
	r := runWatched(t, cfg)
	published := func() int {
		var n int
		_ = pool.QueryRow(ctx, "SELECT count(*) FROM outbox WHERE published").Scan(&n)
		return n
	}
	cutsWhileDraining(t, tap, hold, rows, restarts, published)
	if len(restartErrs) > 0 {
		t.Fatalf("restarts failed: %v", restartErrs)
	}
	waitSettled(t, 120*time.Second, rows, func() (int, error) {
		var n int
		err := pool.QueryRow(ctx, "SELECT count(*) FROM outbox WHERE NOT published").Scan(&n)
		return n, err
	}, col)
	var dead int
	if err := pool.QueryRow(ctx, "SELECT count(*) FROM outbox_relay.failed_events").Scan(&dead); err != nil {
		t.Fatal(err)
	}
	if dead != 0 {
		t.Errorf("%d dead letters; want none", dead)
	}
	r.running(t)
	t.Logf("private PostgreSQL: %d rows, %d claims, restarts (phase/mode): %v; the relay logged %d failed claims, %d failed completions; %v",
		rows, tap.claims.Load(), modes, r.count("claim failed"),
		r.count("complete batch failed; its rows return to the pending set"), time.Since(start).Round(time.Millisecond))
	checkLedger(t, l, col, fmt.Sprintf("PostgreSQL restarted %d times", restarts))
}
