package bench

import (
	"context"
	"fmt"
	"io"
	"maps"
	"slices"
	"strings"
	"sync"
	"time"

	"github.com/jackc/pgx/v5"

	"github.com/outbox-relay/outbox-relay/internal/app"
	"github.com/outbox-relay/outbox-relay/internal/config"
	"github.com/outbox-relay/outbox-relay/internal/layout"
)

// IdleResult is what many idle sources cost the database: the relay's
// statements a second, in all, per source and by kind, once every source
// is held and nothing is written.
type IdleResult struct {
	Sources int `json:"sources"`
	// StartSeconds is how long the relay took to hold every source.
	StartSeconds float64 `json:"start_seconds"`
	// StatementsPerSec counts the relay's statements (client side, every
	// statement of a pipeline, BEGIN and ROLLBACK too), TransactionsPerSec
	// the database's transactions (server side).
	StatementsPerSec   float64            `json:"statements_per_sec"`
	PerSource          float64            `json:"statements_per_sec_per_source"`
	TransactionsPerSec float64            `json:"transactions_per_sec"`
	ByKind             map[string]float64 `json:"statements_per_sec_by_kind"`
}

// idleRun makes n schemas each with an idle outbox table, relays them all
// through one discovery rule, waits until every source is held and counts
// what the relay sends for d.
func idleRun(ctx context.Context, db pgDB, k kafkaEnv, o Options, n int, d time.Duration) (IdleResult, error) {
	res := IdleResult{Sources: n}
	pool, dsn := db.pool, db.dsn
	prefix := newSchema() + "_idle_"
	progress(o, "idle: creating %d schemas, each with an outbox table", n)
	var ddl strings.Builder
	for i := range n {
		s := pgx.Identifier{fmt.Sprintf("%s%04d", prefix, i)}.Sanitize()
		fmt.Fprintf(&ddl, "CREATE SCHEMA %s; CREATE TABLE %s.outbox (id bigserial PRIMARY KEY, k text NOT NULL, payload jsonb NOT NULL);\n", s, s)
	}
	if _, err := pool.Exec(ctx, ddl.String()); err != nil {
		return res, fmt.Errorf("create the idle tables: %w", err)
	}
	defer func() {
		var drop strings.Builder
		for i := range n {
			fmt.Fprintf(&drop, "DROP SCHEMA IF EXISTS %s CASCADE;\n", pgx.Identifier{fmt.Sprintf("%s%04d", prefix, i)}.Sanitize())
		}
		_, _ = pool.Exec(context.WithoutCancel(ctx), drop.String())
	}()
	relaySchema := prefix + "relay"
	cfg := &config.Config{
		RelaySchema: relaySchema,
		Admin:       config.Admin{Listen: "off"},
		Log:         config.Log{Level: "warn"},
		Databases:   map[string]config.Database{"bench": {DSN: dsn}},
		Sinks:       map[string]config.Sink{"kafka": {Type: "kafka", Brokers: k.brokers}},
		Sources: []config.Source{{Name: "idle", Discover: &config.Discover{Schemas: "^" + prefix + `\d+$`, Tables: []string{"outbox"}},
			Layout: layout.Spec{ID: "id", Payload: "payload", Topic: topic, Key: "{k}", OrderBy: "id", State: layout.State{Mode: "delete"}}}},
	}
	cfg.ApplyDefaults()
	if err := cfg.Validate(); err != nil {
		return res, err
	}
	kinds := &kindCounter{n: map[string]int64{}}
	a, err := app.Open(ctx, cfg, o.Logger, app.WithQueryTracer(kinds))
	if err != nil {
		return res, err
	}
	defer func() {
		a.Close()
		_, _ = pool.Exec(context.WithoutCancel(ctx), "DROP SCHEMA IF EXISTS "+pgx.Identifier{relaySchema}.Sanitize()+" CASCADE")
	}()
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
	for {
		var held int
		err := pool.QueryRow(ctx, "SELECT count(*) FROM "+pgx.Identifier{relaySchema}.Sanitize()+".leases WHERE expires_at > now()").Scan(&held)
		if err == nil && held == n {
			break
		}
		if time.Since(start) > 5*time.Minute {
			return res, fmt.Errorf("idle: %d of %d sources held after 5 minutes", held, n)
		}
		time.Sleep(200 * time.Millisecond)
	}
	res.StartSeconds = time.Since(start).Seconds()
	// Triggers installed, first claims and stats written: let them pass,
	// and PostgreSQL's statistics flush with them (see idleQueries).
	time.Sleep(15 * time.Second)
	before, err := readCounters(ctx, pool)
	if err != nil {
		return res, err
	}
	k0 := kinds.snapshot()
	progress(o, "idle: counting the relay's statements for %v", d)
	time.Sleep(d)
	k1 := kinds.snapshot()
	after, err := readCounters(ctx, pool)
	if err != nil {
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
	res.PerSource = res.StatementsPerSec / float64(n)
	res.TransactionsPerSec = float64(after.xacts-before.xacts-2) / d.Seconds()
	return res, nil
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
		fmt.Fprintf(w, "idle: %d sources held after %.1f s; %.1f statements/s (%.3f per source), %.1f transactions/s\n",
			r.Sources, r.StartSeconds, r.StatementsPerSec, r.PerSource, r.TransactionsPerSec)
		for _, k := range slices.Sorted(maps.Keys(r.ByKind)) {
			fmt.Fprintf(w, "  %-30s %8.1f/s\n", k, r.ByKind[k])
		}
	}
}
