package bench

import (
	"context"
	"fmt"
	"runtime/pprof"
	"time"

	"github.com/jackc/pgx/v5/pgxpool"
	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/collectors"

	"github.com/outbox-relay/outbox-relay/internal/app"
	"github.com/outbox-relay/outbox-relay/internal/config"
	"github.com/outbox-relay/outbox-relay/internal/source"
)

// drain measures the ceiling and the relay on a prefilled backlog.
func drain(ctx context.Context, pool *pgxpool.Pool, dsn string, o Options, k kafkaEnv, layout string, ordering bool) (Result, error) {
	t := table{schema: newSchema(), layout: layout, dsn: dsn}
	res := Result{Workload: "drain", Driver: "postgres", Layout: layout, Ordering: ordering, Delivery: firstOr(o.Deliveries, config.DeliveryAtLeastOnce), Rows: o.Rows, Keys: o.Keys, BatchSize: o.BatchSize, Pipeline: o.Pipeline}
	if err := t.create(ctx, pool); err != nil {
		return res, err
	}
	defer t.drop(context.WithoutCancel(ctx), pool)
	tg, err := newTarget(ctx, o, k)
	if err != nil {
		return res, err
	}
	defer tg.close()
	res.Sink, res.SinkNote = tg.kind, tg.note
	progress(o, "sink %s: %s", tg.kind, tg.note)
	a, stmts, cleanup, err := openRelay(ctx, pool, dsn, tg, o, t, ordering)
	if err != nil {
		return res, err
	}
	defer cleanup()

	progress(o, "%s/%s ordering=%v: prefilling %d rows", layout, "drain", ordering, o.Rows)
	if err := t.fill(ctx, pool, o.Rows, o.Keys, o.PayloadBytes); err != nil {
		return res, err
	}
	srcs, err := a.Resolve(ctx)
	if err != nil {
		return res, err
	}
	res.Ceiling, err = measure(ctx, pool, t, nil, stmts, func() (int, error) { return ceiling(ctx, srcs[0].Store, o, layout) })
	if err != nil {
		return res, fmt.Errorf("ceiling: %w", err)
	}
	progress(o, "%s ordering=%v: ceiling %.0f events/s; prefilling again", layout, ordering, res.Ceiling.EventsPerSec)
	if err := t.reset(ctx, pool); err != nil {
		return res, err
	}
	if err := t.fill(ctx, pool, o.Rows, o.Keys, o.PayloadBytes); err != nil {
		return res, err
	}
	if o.RelayProfile != nil {
		if err := pprof.StartCPUProfile(o.RelayProfile); err != nil {
			return res, err
		}
	}
	res.Relay, err = measure(ctx, pool, t, tg.cpu, stmts, func() (int, error) { return relay(ctx, a, o, layout) })
	if o.RelayProfile != nil {
		pprof.StopCPUProfile()
	}
	if err != nil {
		return res, fmt.Errorf("relay: %w", err)
	}
	res.Ratio = res.Relay.EventsPerSec / res.Ceiling.EventsPerSec
	res.PeakRSSBytes = peakRSS()
	if k.br != nil && tg.kind == "kafka" {
		res.BrokerRSS = k.br.rss()
	}
	if tg.stored != nil {
		n, err := tg.stored(ctx)
		if err != nil {
			return res, fmt.Errorf("count what the %s server holds: %w", tg.kind, err)
		}
		res.SinkStored = &n
	}
	progress(o, "%s ordering=%v: relay %.0f events/s, ratio %.2f", layout, ordering, res.Relay.EventsPerSec, res.Ratio)
	return res, nil
}

// openRelay builds (and migrates) a relay process for the benchmark table.
func openRelay(ctx context.Context, pool *pgxpool.Pool, dsn string, tg *target, o Options, t table, ordering bool) (*app.App, *stmtCounter, func(), error) {
	cfg := &config.Config{
		RelaySchema: t.schema + "_relay",
		Admin:       config.Admin{Listen: "off"},
		Log:         config.Log{Level: "warn"},
		Databases:   map[string]config.Database{"bench": {DSN: dsn, MaxConns: o.Pipeline + 4}},
		Sinks:       map[string]config.Sink{tg.kind: tg.sink},
		Sources:     []config.Source{t.source(tg.topic, o.BatchSize, o.Pipeline, ordering)},
	}
	if len(o.Deliveries) > 0 {
		cfg.Sources[0].Delivery = o.Deliveries[0]
	}
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
	cpu0, pg0, br0, start := selfCPU(), postgresCPU(), brokerCPU(), time.Now()
	n, err := fn()
	if err != nil {
		return Measure{}, err
	}
	elapsed := time.Since(start)
	cpu, pg, brc := selfCPU()-cpu0, postgresCPU()-pg0, brokerCPU()-br0
	nstmts := stmts.load() - stmts0
	after, err := readCounters(ctx, pool)
	if err != nil {
		return Measure{}, err
	}
	ev := float64(max(n, 1))
	return Measure{
		Events: n, Seconds: elapsed.Seconds(), EventsPerSec: float64(n) / elapsed.Seconds(),
		CPUMsPer1k:       float64(cpu.Milliseconds()) / ev * 1000,
		PostgresCPUMs1k:  float64(pg.Milliseconds()) / ev * 1000,
		BrokerCPUMs1k:    float64(brc.Milliseconds()) / ev * 1000,
		WALBytesPerEvent: float64(walBytes(ctx, pool, before, after)) / ev,
		XactsPerEvent:    float64(after.xacts-before.xacts) / ev,
		StmtsPerEvent:    float64(nstmts) / ev,
		DeadTuplesAfter:  deadTuples(ctx, pool, t.schema),
	}, nil
}

// ceiling loops the relay's own claim and acknowledge statements, one batch
// at a time, with no broker.
func ceiling(ctx context.Context, st source.Store, o Options, layout string) (int, error) {
	n := 0
	last := time.Now()
	for {
		b, err := st.Claim(ctx, o.BatchSize)
		if err != nil {
			return n, err
		}
		if b == nil {
			return n, nil
		}
		rows := b.Rows()
		all := make([]int, len(rows))
		for i := range all {
			all[i] = i
		}
		if err := b.Complete(ctx, source.Outcome{Published: all}); err != nil {
			return n, err
		}
		n += len(rows)
		if time.Since(last) > time.Second {
			progress(o, "  ceiling: %d/%d", n, o.Rows)
			last = time.Now()
		}
	}
}

// relay runs the whole relay until it has published every row.
func relay(ctx context.Context, a *app.App, o Options, layout string) (int, error) {
	rctx, stop := context.WithCancel(ctx)
	done := make(chan error, 1)
	go func() { done <- a.Run(rctx) }()
	defer func() { stop(); <-done }()
	last := time.Now()
	for {
		n := published(a.Registry())
		if n >= o.Rows {
			return n, nil
		}
		select {
		case err := <-done:
			return n, fmt.Errorf("relay stopped early: %v", err)
		case <-ctx.Done():
			return n, ctx.Err()
		case <-time.After(20 * time.Millisecond):
		}
		if time.Since(last) > time.Second {
			progress(o, "  relay: %d/%d", n, o.Rows)
			last = time.Now()
		}
	}
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

// published reads outbox_relay_events_published_total from the registry.
func published(reg *prometheus.Registry) int {
	mfs, _ := reg.Gather()
	total := 0.0
	for _, mf := range mfs {
		if mf.GetName() != "outbox_relay_events_published_total" {
			continue
		}
		for _, m := range mf.GetMetric() {
			total += m.GetCounter().GetValue()
		}
	}
	return int(total)
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
