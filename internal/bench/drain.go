package bench

import (
	"cmp"
	"context"
	"fmt"
	"runtime/pprof"
	"time"

	"github.com/jackc/pgx/v5/pgxpool"
	"github.com/prometheus/client_golang/prometheus/collectors"

	"github.com/outbox-relay/outbox-relay/internal/app"
	"github.com/outbox-relay/outbox-relay/internal/config"
	// Registers the database drivers (postgres, mysql) that configurations name.
	_ "github.com/outbox-relay/outbox-relay/internal/source/all"
)

// drain measures one table on PostgreSQL: the ceiling and the relay on a
// prefilled backlog (drainPasses).
func drain(ctx context.Context, pool *pgxpool.Pool, dsn string, o Options, k kafkaEnv, sp *spec, ordering bool) (Result, error) {
	res, o := newDrainResult(o, "postgres", sp, sp.pg, ordering)
	return drainPasses(ctx, o, res, k, func(o Options, analyze, withCeiling bool) (pass, error) {
		return pgPass(ctx, pool, dsn, o, k, sp, ordering, analyze, withCeiling)
	})
}

// pgPass makes a fresh table of sp's shape and its relay, prefills it and
// drains it: with a ceiling, the ceiling loop first and the relay on a
// second prefill. Analyze runs VACUUM ANALYZE after each prefill; with
// o.NoAnalyze autovacuum is off for the table either way.
func pgPass(ctx context.Context, pool *pgxpool.Pool, dsn string, o Options, k kafkaEnv, sp *spec, ordering, analyze, withCeiling bool) (pass, error) {
	var p pass
	t := newTable(sp.name, sp.pg, dsn)
	t.cursor = o.cursor()
	if err := t.create(ctx, pool); err != nil {
		return p, err
	}
	defer t.drop(context.WithoutCancel(ctx), pool)
	tg, err := newTarget(ctx, o, k)
	if err != nil {
		return p, err
	}
	defer tg.close()
	p.sink, p.note = tg.kind, tg.note
	progress(o, "sink %s: %s", tg.kind, tg.note)
	a, stmts, cleanup, err := openRelay(ctx, pool, dsn, tg, o, t, ordering)
	if err != nil {
		return p, err
	}
	defer cleanup()
	if o.NoAnalyze {
		if err := t.autovacuumOff(ctx, pool); err != nil {
			return p, err
		}
	}
	fill := func() error {
		progress(o, "%s ordering=%v: prefilling %d rows after %d delivered (analyze: %v)", t.layout, ordering, o.Rows, o.History, analyze)
		return t.fill(ctx, pool, tg.topic, o.History, o.Rows, o.Keys, o.PayloadBytes, analyze)
	}
	if err := fill(); err != nil {
		return p, err
	}
	if withCeiling {
		if o.cursor() {
			p.ceiling, err = cursorCeiling(ctx, pool, dsn, tg, o, t, ordering)
		} else {
			p.ceiling, err = ceilingOf(ctx, pool, a, stmts, o, t)
		}
		if err != nil {
			return p, fmt.Errorf("ceiling: %w", err)
		}
		progress(o, "%s ordering=%v: ceiling %.0f events/s%s", t.layout, ordering, p.ceiling.EventsPerSec, cutNote(p.ceiling))
		if err := t.reset(ctx, pool); err != nil {
			return p, err
		}
		if err := fill(); err != nil {
			return p, err
		}
	}
	planned := t.plannerRows(ctx, pool)
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
	p.relay, err = measure(ctx, pool, t, tg.cpu, stmts, func() (int, error) { return relayAll(ctx, apps, o) })
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
		rows, done, err := t.counts(ctx, pool)
		if err != nil {
			return p, err
		}
		p.rowsAfter, p.doneAfter = &rows, &done
	}
	return p, nil
}

// openRelay builds (and migrates) a relay process for the benchmark table.
func openRelay(ctx context.Context, pool *pgxpool.Pool, dsn string, tg *target, o Options, t table, ordering bool) (*app.App, *stmtCounter, func(), error) {
	cfg := &config.Config{
		RelaySchema: t.schema + cmp.Or(o.relaySuffix, "_relay"),
		Admin:       config.Admin{Listen: "off"},
		Log:         config.Log{Level: "warn"},
		Databases:   map[string]config.Database{"bench": {DSN: dsn, MaxConns: o.maxConns()}},
		Sinks:       map[string]config.Sink{tg.kind: tg.sink},
		Sources:     []config.Source{t.source(tg.topic, o.BatchSize, o.Pipeline, ordering)},
	}
	if o.cursor() {
		cfg.Sources[0].Capture, cfg.Sources[0].Layout.XIDColumn = config.CaptureCursor, cursorColumn
	}
	if len(o.Deliveries) > 0 {
		cfg.Sources[0].Delivery = o.Deliveries[0]
	}
	cfg.Sources[0].Shards = max(o.Shards, 1)
	cfg.ApplyDefaults()
	if err := cfg.Validate(); err != nil {
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
		_, _ = pool.Exec(context.WithoutCancel(ctx), "DROP SCHEMA IF EXISTS "+cfg.RelaySchema+" CASCADE")
	}
	if err := a.Migrate(ctx); err != nil {
		cleanup()
		return nil, nil, nil, err
	}
	return a, stmts, cleanup, nil
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

// measure runs fn and reads the machine's counters around it.
// serverCPU, when not nil, is the broker's CPU time so far.
func measure(ctx context.Context, pool *pgxpool.Pool, t table, serverCPU func() time.Duration, stmts *stmtCounter, fn func() (int, error)) (Measure, error) {
	before, err := readCounters(ctx, pool)
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
	after, err := readCounters(ctx, pool)
	if err != nil {
		return Measure{}, err
	}
	ev := float64(max(n, 1))
	return Measure{
		Events: n, Seconds: elapsed.Seconds(), EventsPerSec: float64(n) / elapsed.Seconds(), CutShort: cut,
		CPUMsPer1k:       float64(cpu.Milliseconds()) / ev * 1000,
		PostgresCPUMs1k:  float64(pg.Milliseconds()) / ev * 1000,
		BrokerCPUMs1k:    float64(brc.Milliseconds()) / ev * 1000,
		WALBytesPerEvent: float64(walBytes(ctx, pool, before, after)) / ev,
		XactsPerEvent:    float64(after.xacts-before.xacts) / ev,
		StmtsPerEvent:    float64(nstmts) / ev,
		DeadTuplesAfter:  deadTuples(ctx, pool, t.schema),
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
