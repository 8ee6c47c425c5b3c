package bench

import (
	"cmp"
	"context"
	"fmt"
	"io"
	"maps"
	"slices"
	"strings"
	"sync"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/prometheus/client_golang/prometheus"

	"github.com/outbox-relay/outbox-relay/internal/app"
	"github.com/outbox-relay/outbox-relay/internal/config"
	"github.com/outbox-relay/outbox-relay/internal/layout"
)

// IdleResult is what many idle sources cost the database: the relay's
// statements a second, in all, per source and by kind, once every source
// is held and nothing is written.
type IdleResult struct {
	Sources int `json:"sources"`
	// Databases is how many databases the sources are in, one each
	// (--databases; 0: schemas of the run's own database).
	Databases int `json:"databases,omitempty"`
	// StartSeconds is how long the relay took to hold every source.
	StartSeconds float64 `json:"start_seconds"`
	// StatementsPerSec counts the relay's statements (client side, every
	// statement of a pipeline, BEGIN and ROLLBACK too), TransactionsPerSec
	// the database's transactions (server side; with databases, those of
	// every one of them and of the run's own, where discovery reads the
	// catalogue).
	StatementsPerSec   float64            `json:"statements_per_sec"`
	PerSource          float64            `json:"statements_per_sec_per_source"`
	TransactionsPerSec float64            `json:"transactions_per_sec"`
	ByKind             map[string]float64 `json:"statements_per_sec_by_kind"`
	// Connections counts the relay's sessions at the server (its
	// listeners' too) at the end.
	Connections int `json:"connections"`
	// PerDatabase, TransactionsPerDatabase and ConnectionsPerDatabase are
	// the statements and transactions a second and the sessions, per
	// database (with databases).
	PerDatabase             float64 `json:"statements_per_sec_per_database,omitempty"`
	TransactionsPerDatabase float64 `json:"transactions_per_sec_per_database,omitempty"`
	ConnectionsPerDatabase  float64 `json:"connections_per_database,omitempty"`
}

// idleLayout is the idle tables' layout.
var idleLayout = layout.Spec{ID: "id", Payload: "payload", Topic: topic, Key: "{k}", OrderBy: "id", State: layout.State{Mode: "delete"}}

// idleTable makes an idle outbox table in schema (quoted).
const idleTable = "CREATE TABLE %s.outbox (id bigserial PRIMARY KEY, k text NOT NULL, payload jsonb NOT NULL);\n"

// idleRun makes n schemas each with an idle outbox table, relays them all
// through one discovery rule, waits until every source is held and counts
// what the relay sends for d.
func idleRun(ctx context.Context, own pgDB, k kafkaEnv, o Options, n int, d time.Duration) (IdleResult, error) {
	prefix := newSchema() + "_idle_"
	progress(o, "idle: creating %d schemas, each with an outbox table", n)
	var ddl strings.Builder
	for i := range n {
		s := pgx.Identifier{fmt.Sprintf("%s%04d", prefix, i)}.Sanitize()
		fmt.Fprintf(&ddl, "CREATE SCHEMA %s; "+idleTable, s, s)
	}
	if _, err := own.pool.Exec(ctx, ddl.String()); err != nil {
		return IdleResult{}, fmt.Errorf("create the idle tables: %w", err)
	}
	defer func() {
		var drop strings.Builder
		for i := range n {
			fmt.Fprintf(&drop, "DROP SCHEMA IF EXISTS %s CASCADE;\n", pgx.Identifier{fmt.Sprintf("%s%04d", prefix, i)}.Sanitize())
		}
		_, _ = own.pool.Exec(context.WithoutCancel(ctx), drop.String())
	}()
	relaySchema := prefix + "relay"
	defer pgDBs{own}.dropSchema(ctx, relaySchema)
	cfg := &config.Config{
		RelaySchema: relaySchema,
		Databases:   map[string]config.Database{"bench": {DSN: own.dsn}},
		Sources: []config.Source{{Name: "idle", Discover: &config.Discover{Schemas: "^" + prefix + `\d+$`, Tables: []string{"outbox"}},
			Layout: idleLayout}},
	}
	return idleCount(ctx, own, pgDBs{own}, cfg, k, o, IdleResult{Sources: n}, d)
}

// idleDatabasesRun makes n databases (--databases) each with an idle
// outbox table, relays them all through one entry that discovers them by
// pattern, waits until every source is held and counts what the relay
// sends for d.
func idleDatabasesRun(ctx context.Context, own pgDB, k kafkaEnv, o Options, n int, d time.Duration) (IdleResult, error) {
	res := IdleResult{Sources: n, Databases: n}
	perDB := cmp.Or(o.MaxConns, config.DefaultMemberMaxConns)
	if err := roomFor(ctx, own.pool, relayConnections(n, 1, perDB), fmt.Sprintf("--databases %d: the relay may open max_conns (%d) and a listening connection to each database", n, perDB)); err != nil {
		return res, err
	}
	progress(o, "idle: creating %d databases, each with an outbox table", n)
	dbs, drop, err := moreDatabases(ctx, own, n)
	if err != nil {
		return res, err
	}
	defer drop()
	err = dbs.each(func(_ int, db pgDB) error {
		_, err := db.pool.Exec(ctx, fmt.Sprintf(idleTable, "public"))
		db.pool.Close() // the server's connections are for the relay
		return err
	})
	if err != nil {
		return res, fmt.Errorf("create the idle tables: %w", err)
	}
	cfg := &config.Config{
		Databases: map[string]config.Database{"tenants": {DSN: own.dsn, MaxConns: o.MaxConns,
			Discover: &config.DatabaseDiscover{Pattern: memberPattern(own.name)}}},
		Sources: []config.Source{{Name: "idle", Table: "public.outbox", Layout: idleLayout}},
	}
	res, err = idleCount(ctx, own, append(pgDBs{own}, dbs...), cfg, k, o, res, d)
	if err != nil {
		return res, err
	}
	res.PerDatabase = res.StatementsPerSec / float64(n)
	res.TransactionsPerDatabase = res.TransactionsPerSec / float64(n)
	res.ConnectionsPerDatabase = float64(res.Connections) / float64(n)
	return res, nil
}

// idleCount runs the relay of cfg (its sources and databases; the rest is
// set here) on idle tables, waits until it holds res.Sources sources, lets
// its start pass and counts its statements and the transactions of dbs
// for d.
func idleCount(ctx context.Context, own pgDB, dbs pgDBs, cfg *config.Config, k kafkaEnv, o Options, res IdleResult, d time.Duration) (IdleResult, error) {
	cfg.Admin = config.Admin{Listen: "off"}
	cfg.Log = config.Log{Level: "warn"}
	cfg.Sinks = map[string]config.Sink{"kafka": {Type: "kafka", Brokers: k.brokers}}
	cfg.ApplyDefaults()
	if err := cfg.Validate(); err != nil {
		return res, err
	}
	kinds := &kindCounter{n: map[string]int64{}}
	a, err := app.Open(ctx, cfg, o.Logger, app.WithQueryTracer(kinds))
	if err != nil {
		return res, err
	}
	defer a.Close()
	quietRegistry(a)
	if err := a.Migrate(ctx); err != nil {
		return res, err
	}
	rctx, stop := context.WithCancel(ctx)
	var wg sync.WaitGroup
	defer func() { stop(); wg.Wait() }()
	start := time.Now()
	wg.Go(func() {
		if err := a.Run(rctx); err != nil && rctx.Err() == nil {
			progress(o, "idle: relay: %v", err)
		}
	})
	progress(o, "idle: waiting for the relay to hold every source")
	for held := 0; held < res.Sources; held = relayingSources(a.Registry()) {
		if time.Since(start) > 5*time.Minute {
			return res, fmt.Errorf("idle: %d of %d sources held after 5 minutes", held, res.Sources)
		}
		time.Sleep(200 * time.Millisecond)
	}
	res.StartSeconds = time.Since(start).Seconds()
	// Triggers installed, first claims and stats written: let them pass,
	// and PostgreSQL's statistics flush with them (see idleQueries).
	time.Sleep(15 * time.Second)
	before, err := dbs.counters(ctx)
	if err != nil {
		return res, err
	}
	k0 := kinds.snapshot()
	progress(o, "idle: counting the relay's statements for %v", d)
	time.Sleep(d)
	k1 := kinds.snapshot()
	after, err := dbs.counters(ctx)
	if err != nil {
		return res, err
	}
	if res.Connections, err = sessions(ctx, own, dbs); err != nil {
		return res, err
	}
	res.ByKind = map[string]float64{}
	var total int64
	for kind, v := range k1 {
		if dv := v - k0[kind]; dv > 0 {
			res.ByKind[kind] = float64(dv) / d.Seconds()
			total += dv
		}
	}
	res.StatementsPerSec = float64(total) / d.Seconds()
	res.PerSource = res.StatementsPerSec / float64(res.Sources)
	res.TransactionsPerSec = float64(after.xacts-before.xacts-2) / d.Seconds()
	return res, nil
}

// sessions counts the server's sessions on dbs but own's pool's: the
// relay's, its listeners' included.
func sessions(ctx context.Context, own pgDB, dbs pgDBs) (int, error) {
	var n int
	err := own.pool.QueryRow(ctx, "SELECT count(*) FROM pg_stat_activity WHERE datname = ANY($1)", dbs.names()).Scan(&n)
	return n - int(own.pool.Stat().TotalConns()), err
}

// relayingSources is how many sources the relay whose registry is reg
// relays now (outbox_relay_source_relaying).
func relayingSources(reg prometheus.Gatherer) int {
	mfs, err := reg.Gather()
	if err != nil {
		return 0
	}
	n := 0.0
	for _, mf := range mfs {
		if mf.GetName() == "outbox_relay_source_relaying" {
			for _, m := range mf.GetMetric() {
				n += m.GetGauge().GetValue()
			}
		}
	}
	return int(n)
}

// kindCounter counts the relay's statements by what they do, read from
// their text.
type kindCounter struct {
	mu sync.Mutex
	n  map[string]int64
}

func (c *kindCounter) add(sql string) {
	kind := statementKind(sql)
	c.mu.Lock()
	c.n[kind]++
	c.mu.Unlock()
}

func (c *kindCounter) snapshot() map[string]int64 {
	c.mu.Lock()
	defer c.mu.Unlock()
	return maps.Clone(c.n)
}

// statementKind names a relay statement by the command it starts with or
// the relay table it is about.
func statementKind(sql string) string {
	s := strings.ToLower(strings.TrimSpace(sql))
	for _, cmd := range []string{"begin", "commit", "rollback"} {
		if strings.HasPrefix(s, cmd) {
			return cmd
		}
	}
	for _, k := range []struct{ kind, has string }{
		{"claim settings", "set_config("},
		{"replicas (heartbeat, census)", ".replicas"},
		{"stats (relay_state)", ".relay_state"},
		{"leases", ".leases"},
		{"claim", "for update"},
	} {
		if strings.Contains(s, k.has) {
			return k.kind
		}
	}
	return "other"
}

func (c *kindCounter) TraceQueryStart(ctx context.Context, _ *pgx.Conn, d pgx.TraceQueryStartData) context.Context {
	c.add(d.SQL)
	return ctx
}

func (c *kindCounter) TraceQueryEnd(context.Context, *pgx.Conn, pgx.TraceQueryEndData) {}

func (c *kindCounter) TraceBatchStart(ctx context.Context, _ *pgx.Conn, _ pgx.TraceBatchStartData) context.Context {
	return ctx
}

func (c *kindCounter) TraceBatchQuery(_ context.Context, _ *pgx.Conn, d pgx.TraceBatchQueryData) {
	c.add(d.SQL)
}

func (c *kindCounter) TraceBatchEnd(context.Context, *pgx.Conn, pgx.TraceBatchEndData) {}

// printIdle writes the idle results.
func printIdle(w io.Writer, rs []IdleResult) {
	for _, r := range rs {
		if r.Databases > 0 {
			fmt.Fprintf(w, "idle: %d databases, a source each, held after %.1f s; %.1f statements/s (%.3f per database), %.1f transactions/s (%.3f per database); %.1f connections per database\n",
				r.Databases, r.StartSeconds, r.StatementsPerSec, r.PerDatabase, r.TransactionsPerSec, r.TransactionsPerDatabase, r.ConnectionsPerDatabase)
		} else {
			fmt.Fprintf(w, "idle: %d sources held after %.1f s; %.1f statements/s (%.3f per source), %.1f transactions/s; %d connections\n",
				r.Sources, r.StartSeconds, r.StatementsPerSec, r.PerSource, r.TransactionsPerSec, r.Connections)
		}
		for _, k := range slices.Sorted(maps.Keys(r.ByKind)) {
			fmt.Fprintf(w, "  %-30s %8.1f/s\n", k, r.ByKind[k])
		}
	}
}
