package bench

import (
	"context"
	"fmt"
	"runtime/pprof"
	"time"

	"github.com/prometheus/client_golang/prometheus/collectors"

	"github.com/outbox-relay/outbox-relay/internal/app"
	"github.com/outbox-relay/outbox-relay/internal/config"
	// Registers the database drivers (postgres, mysql) that configurations name.
	_ "github.com/outbox-relay/outbox-relay/internal/source/all"
)

// drain measures one table on PostgreSQL: the ceiling and the relay on a
// prefilled backlog (drainPasses), in each of dbs.
func drain(ctx context.Context, dbs pgDBs, o Options, k kafkaEnv, sp *spec, ordering bool) (Result, error) {
	res, o := newDrainResult(o, "postgres", sp, sp.pg, ordering)
	return drainPasses(ctx, o, res, k, func(o Options, analyze, withCeiling bool) (pass, error) {
		return pgPass(ctx, dbs, o, k, sp, ordering, analyze, withCeiling)
	})
}

// pgPass makes a fresh table of sp's shape in each of dbs and its relay,
// prefills them (each database its share of the rows) and drains them:
// with a ceiling, the ceiling loop first (on every database at once) and
// the relay on a second prefill. Analyze runs VACUUM ANALYZE after each
// prefill; with o.NoAnalyze autovacuum is off for the table either way.
func pgPass(ctx context.Context, dbs pgDBs, o Options, k kafkaEnv, sp *spec, ordering, analyze, withCeiling bool) (pass, error) {
	var p pass
	t := newTable(sp.name, sp.pg, "")
	defer dbs.dropSchema(ctx, t.schema)
	if err := dbs.each(func(_ int, db pgDB) error { return t.in(db.dsn).create(ctx, db.pool) }); err != nil {
		return p, err
	}
	tg, err := newTarget(ctx, o, k)
	if err != nil {
		return p, err
	}
	defer tg.close()
	p.sink, p.note = tg.kind, tg.note
	progress(o, "sink %s: %s", tg.kind, tg.note)
	a, stmts, cleanup, err := openRelay(ctx, dbs, tg, o, t, ordering)
	if err != nil {
		return p, err
	}
	defer cleanup()
	if o.NoAnalyze {
		if err := dbs.each(func(_ int, db pgDB) error { return t.autovacuumOff(ctx, db.pool) }); err != nil {
			return p, err
		}
	}
	fill := func() error {
		progress(o, "%s ordering=%v: prefilling %d rows after %d delivered%s (analyze: %v)", t.layout, ordering, o.Rows, o.History, inDatabases(len(dbs), o), analyze)
		return dbs.each(func(i int, db pgDB) error {
			return t.fill(ctx, db.pool, tg.topic, share(o.History, i, len(dbs)), share(o.Rows, i, len(dbs)), o.Keys, o.PayloadBytes, analyze)
		})
	}
	if err := fill(); err != nil {
		return p, err
	}
	if withCeiling {
		srcs, err := a.Resolve(ctx)
		if err != nil {
			return p, err
		}
		p.ceiling, err = measure(ctx, dbs, t, nil, stmts, func() (int, error) { return ceilingAll(ctx, stores(srcs), o) })
		if err != nil {
			return p, fmt.Errorf("ceiling: %w", err)
		}
		progress(o, "%s ordering=%v: ceiling %.0f events/s%s", t.layout, ordering, p.ceiling.EventsPerSec, cutNote(p.ceiling))
		if err := dbs.each(func(_ int, db pgDB) error { return t.reset(ctx, db.pool) }); err != nil {
			return p, err
		}
		if err := fill(); err != nil {
			return p, err
		}
	}
	planned := t.plannerRows(ctx, dbs[0].pool)
	if o.RelayProfile != nil {
		if err := pprof.StartCPUProfile(o.RelayProfile); err != nil {
			return p, err
		}
	}
	apps := []*app.App{a}
	for range max(o.Replicas, 1) - 1 {
		more, err := openReplica(ctx, a.Config(), o, stmts)
		if err != nil {
			return p, err
		}
		defer more.Close()
		apps = append(apps, more)
	}
	p.relay, err = measure(ctx, dbs, t, tg.cpu, stmts, func() (int, error) { return relayAll(ctx, apps, o) })
	if o.RelayProfile != nil {
		pprof.StopCPUProfile()
	}
	if err != nil {
		return p, fmt.Errorf("relay: %w", err)
	}
	p.relay.PlannerRows = planned
	if tg.stored != nil {
		n, err := tg.stored(ctx)
		if err != nil {
			return p, fmt.Errorf("count what the %s server holds: %w", tg.kind, err)
		}
		p.stored = &n
	}
	if o.History > 0 {
		var rows, done int
		err := dbs.each(func(_ int, db pgDB) error {
			r, d, err := t.counts(ctx, db.pool)
			rows, done = rows+r, done+d
			return err
		})
		if err != nil {
			return p, err
		}
		p.rowsAfter, p.doneAfter = &rows, &done
	}
	return p, nil
}

// inDatabases says, in a progress line, over how many databases a drain
// runs (--databases).
func inDatabases(n int, o Options) string {
	if o.Databases == 0 {
		return ""
	}
	return fmt.Sprintf(" over %d databases", n)
}

// openRelay builds (and migrates) a relay process for the benchmark table
// in dbs: a database of the configuration, or with o.Databases an entry
// that lists them all.
func openRelay(ctx context.Context, dbs pgDBs, tg *target, o Options, t table, ordering bool) (*app.App, *stmtCounter, func(), error) {
	cfg, err := relayConfig(dbs, tg, o, t, ordering)
	if err != nil {
		return nil, nil, nil, err
	}
	stmts := &stmtCounter{}
	a, err := app.Open(ctx, cfg, o.Logger, app.WithQueryTracer(stmts))
	if err != nil {
		return nil, nil, nil, err
	}
	quietRegistry(a)
	cleanup := func() {
		a.Close()
		dbs.dropSchema(ctx, cfg.RelaySchema)
	}
	if err := a.Migrate(ctx); err != nil {
		cleanup()
		return nil, nil, nil, err
	}
	if err := migrateMembers(ctx, cfg); err != nil {
		cleanup()
		return nil, nil, nil, err
	}
	return a, stmts, cleanup, nil
}

// relayConfig is the configuration of a relay process for the benchmark
// table t in dbs, with o's settings, its defaults applied.
func relayConfig(dbs pgDBs, tg *target, o Options, t table, ordering bool) (*config.Config, error) {
	cfg := &config.Config{
		RelaySchema: t.schema + "_relay",
		Admin:       config.Admin{Listen: "off"},
		Log:         config.Log{Level: "warn"},
		LeaseTTL:    config.Duration(o.LeaseTTL),
		Databases:   map[string]config.Database{"bench": benchDatabase(dbs, o)},
		Sinks:       map[string]config.Sink{tg.kind: tg.sink},
		Sources:     []config.Source{t.source(tg.topic, o.BatchSize, o.Pipeline, ordering)},
	}
	if len(o.Deliveries) > 0 {
		cfg.Sources[0].Delivery = o.Deliveries[0]
	}
	cfg.Sources[0].Shards = max(o.Shards, 1)
	cfg.ApplyDefaults()
	return cfg, cfg.Validate()
}

// benchDatabase is the relay's database entry for dbs: the one database, or
// (o.Databases) an entry listing them all, each with the connections its
// source's buckets and batches in flight need.
func benchDatabase(dbs pgDBs, o Options) config.Database {
	if o.Databases == 0 {
		return config.Database{DSN: dbs[0].dsn, MaxConns: o.maxConns()}
	}
	return config.Database{DSNs: dbs.dsns(), MaxConns: o.maxConns()}
}

// migrateMembers applies the relay's migrations (and those of the tables it
// manages) in each database of cfg's entries of several databases now:
// App.Migrate leaves them to Run, and the ceiling loop runs before it.
func migrateMembers(ctx context.Context, cfg *config.Config) error {
	targets, err := app.Databases(ctx, cfg)
	if err != nil {
		return err
	}
	for _, tg := range targets {
		if !tg.Member() {
			continue
		}
		m, err := app.NewMigratorFor(cfg, tg.Name, tg.Database)
		if err != nil {
			return err
		}
		_, err = app.Up(ctx, m)
		_ = m.Close()
		if err != nil {
			return fmt.Errorf("%s: %w", tg.Name, err)
		}
		if err := app.MigrateTablesOn(ctx, cfg, tg.Name, tg.Database); err != nil {
			return err
		}
	}
	return nil
}

// openReplica opens another relay process on cfg (migrated already): a
// replica sharing the benchmark's source with the first.
func openReplica(ctx context.Context, cfg *config.Config, o Options, stmts *stmtCounter) (*app.App, error) {
	a, err := app.Open(ctx, cfg, o.Logger, app.WithQueryTracer(stmts))
	if err != nil {
		return nil, err
	}
	quietRegistry(a)
	return a, nil
}

// measure runs fn and reads the machine's counters around it (those of
// every database of dbs).
// serverCPU, when not nil, is the broker's CPU time so far.
func measure(ctx context.Context, dbs pgDBs, t table, serverCPU func() time.Duration, stmts *stmtCounter, fn func() (int, error)) (Measure, error) {
	before, err := dbs.counters(ctx)
	if err != nil {
		return Measure{}, err
	}
	brokerCPU := func() time.Duration {
		if serverCPU == nil {
			return 0
		}
		return serverCPU()
	}
	stmts0 := stmts.load()
	cpu0, pg0, br0 := selfCPU(), postgresCPU(), brokerCPU()
	n, elapsed, cut, err := measured(fn)
	if err != nil {
		return Measure{}, err
	}
	cpu, pg, brc := selfCPU()-cpu0, postgresCPU()-pg0, brokerCPU()-br0
	nstmts := stmts.load() - stmts0
	after, err := dbs.counters(ctx)
	if err != nil {
		return Measure{}, err
	}
	ev := float64(max(n, 1))
	return Measure{
		Events: n, Seconds: elapsed.Seconds(), EventsPerSec: float64(n) / elapsed.Seconds(), CutShort: cut,
		CPUMsPer1k:       float64(cpu.Milliseconds()) / ev * 1000,
		PostgresCPUMs1k:  float64(pg.Milliseconds()) / ev * 1000,
		BrokerCPUMs1k:    float64(brc.Milliseconds()) / ev * 1000,
		WALBytesPerEvent: float64(walBytes(ctx, dbs[0].pool, before, after)) / ev,
		XactsPerEvent:    float64(after.xacts-before.xacts) / ev,
		StmtsPerEvent:    float64(nstmts) / ev,
		DeadTuplesAfter:  dbs.deadTuples(ctx, t.schema),
	}, nil
}

// quietRegistry takes the Go runtime and process collectors out of the
// relay's registry: relay polls the registry every 20ms, and the process
// collector's reading of /proc on each poll was a tenth of the CPU counted
// as the relay's. The relay under test serves no /metrics, so nothing else
// gathers them.
func quietRegistry(a *app.App) {
	a.Registry().Unregister(collectors.NewProcessCollector(collectors.ProcessCollectorOpts{}))
	a.Registry().Unregister(collectors.NewGoCollector())
}

func progress(o Options, format string, args ...any) {
	if o.Progress != nil {
		fmt.Fprintf(o.Progress, format+"\n", args...)
	}
}

// firstOr is the first of vs, or v when there is none.
func firstOr(vs []string, v string) string {
	if len(vs) == 0 {
		return v
	}
	return vs[0]
}
