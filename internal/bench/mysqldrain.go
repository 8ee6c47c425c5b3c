package bench

import (
	"context"
	"fmt"
	"runtime/pprof"
	"strings"
	"time"

	"github.com/outbox-relay/outbox-relay/internal/app"
	"github.com/outbox-relay/outbox-relay/internal/config"
)

// runMySQL runs the drain or keys workload on MySQL or MariaDB (o.MySQLDSN).
func runMySQL(ctx context.Context, o Options) (*Report, error) {
	if o.MySQLDSN == "" {
		o.MySQLDSN = DefaultMySQLDSN
	}
	r, err := openMyRun(ctx, o.MySQLDSN)
	if err != nil {
		return nil, err
	}
	defer r.close(ctx)
	k, stopKafka, err := newKafkaEnv(o)
	if err != nil {
		return nil, err
	}
	defer stopKafka()
	rep := &Report{}
	if o.Workload == "keys" {
		for _, keys := range []int{1, o.Keys} {
			res, err := keysMySQL(ctx, r, o, k, keys)
			if err != nil {
				return rep, err
			}
			rep.Drain = append(rep.Drain, res)
		}
		return rep, nil
	}
	specs, err := drainSpecs(o)
	if err != nil {
		return nil, err
	}
	for _, sp := range specs {
		for _, ordering := range o.Orderings {
			err := eachDelivery(&o, func(od Options) error {
				res, err := drainMySQL(ctx, r, od, k, sp, ordering)
				if err == nil {
					rep.Drain = append(rep.Drain, res)
				}
				return err
			})
			if err != nil {
				return rep, err
			}
		}
	}
	return rep, nil
}

// drainMySQL measures one table on MySQL or MariaDB, as drain does on
// PostgreSQL.
func drainMySQL(ctx context.Context, r *myRun, o Options, k kafkaEnv, sp *spec, ordering bool) (Result, error) {
	res, o := newDrainResult(o, "mysql", sp, sp.my, ordering)
	return drainPasses(ctx, o, res, k, func(o Options, analyze, withCeiling bool) (pass, error) {
		return myPass(ctx, r, o, k, sp, ordering, analyze, withCeiling)
	})
}

// myPass is pgPass on MySQL or MariaDB. With o.NoAnalyze the table's InnoDB
// statistics are persistent and not recalculated automatically: only
// ANALYZE TABLE (analyze) updates them.
func myPass(ctx context.Context, r *myRun, o Options, k kafkaEnv, sp *spec, ordering, analyze, withCeiling bool) (pass, error) {
	var p pass
	t := newMyTable(sp.name, sp.my)
	if err := t.create(ctx, r.db); err != nil {
		return p, err
	}
	defer t.drop(context.WithoutCancel(ctx), r.db)
	tg, err := newTarget(ctx, o, k)
	if err != nil {
		return p, err
	}
	defer tg.close()
	p.sink, p.note = tg.kind, tg.note
	progress(o, "sink %s: %s", tg.kind, tg.note)
	a, cleanup, err := openMyRelay(ctx, r, tg, o, t, ordering)
	if err != nil {
		return p, err
	}
	defer cleanup()
	// A statement the relay gave up on at the time limit runs on in the
	// server, holding the table: end it before the table is dropped.
	defer r.killQueries(context.WithoutCancel(ctx))
	if o.NoAnalyze {
		if err := t.statsFixed(ctx, r.db); err != nil {
			return p, err
		}
	}
	fill := func() error {
		progress(o, "%s ordering=%v: prefilling %d rows after %d delivered (analyze: %v)", t.layout, ordering, o.Rows, o.History, analyze)
		return t.fill(ctx, r.db, tg.topic, o.History, o.Rows, o.Keys, o.PayloadBytes, analyze)
	}
	if err := fill(); err != nil {
		return p, err
	}
	if withCeiling {
		srcs, err := a.Resolve(ctx)
		if err != nil {
			return p, err
		}
		p.ceiling, err = measureMySQL(ctx, r, nil, func() (int, error) { return ceiling(ctx, srcs[0].Store, o) })
		if err != nil {
			return p, fmt.Errorf("ceiling: %w", err)
		}
		progress(o, "%s ordering=%v: ceiling %.0f events/s%s", t.layout, ordering, p.ceiling.EventsPerSec, cutNote(p.ceiling))
		r.killQueries(ctx)
		if err := t.reset(ctx, r.db); err != nil {
			return p, err
		}
		if err := fill(); err != nil {
			return p, err
		}
	}
	planned := t.plannerRows(ctx, r.db, r.name)
	if o.RelayProfile != nil {
		if err := pprof.StartCPUProfile(o.RelayProfile); err != nil {
			return p, err
		}
	}
	p.relay, err = measureMySQL(ctx, r, tg.cpu, func() (int, error) { return relay(ctx, a, o) })
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
		rows, done, err := t.counts(ctx, r.db)
		if err != nil {
			return p, err
		}
		p.rowsAfter, p.doneAfter = &rows, &done
	}
	return p, nil
}

// keysMySQL drains a backlog with ordering on over keys keys and checks
// per-key order with a consumer, as keysRun does on PostgreSQL.
func keysMySQL(ctx context.Context, r *myRun, o Options, k kafkaEnv, keys int) (Result, error) {
	t := newMyTable("delete", deleteLayoutMy)
	res := Result{Workload: "keys", Driver: "mysql", Layout: t.layout, Ordering: true, Rows: o.Rows, Keys: keys, BatchSize: o.BatchSize, Pipeline: o.Pipeline}
	if err := t.create(ctx, r.db); err != nil {
		return res, err
	}
	defer t.drop(context.WithoutCancel(ctx), r.db)
	tg := kafkaTarget(k)
	res.Sink, res.SinkNote = tg.kind, tg.note
	a, cleanup, err := openMyRelay(ctx, r, tg, o, t, true)
	if err != nil {
		return res, err
	}
	defer cleanup()
	progress(o, "keys=%d: prefilling %d rows", keys, o.Rows)
	if err := t.fill(ctx, r.db, tg.topic, 0, o.Rows, keys, o.PayloadBytes, true); err != nil {
		return res, err
	}
	oc, err := newOrderChecker(ctx, k.brokers)
	if err != nil {
		return res, err
	}
	defer oc.stop()
	res.Relay, err = measureMySQL(ctx, r, tg.cpu, func() (int, error) { return relay(ctx, a, o) })
	if err != nil {
		return res, err
	}
	deadline := time.Now().Add(30 * time.Second)
	for oc.count() < o.Rows && time.Now().Before(deadline) {
		time.Sleep(20 * time.Millisecond)
	}
	held := oc.count() >= o.Rows && oc.violations() == 0
	res.OrderHeld = &held
	res.PeakRSSBytes = peakRSS()
	progress(o, "keys=%d: relay %.0f events/s, order held: %v (%d received, %d out of order)", keys, res.Relay.EventsPerSec, held, oc.count(), oc.violations())
	return res, nil
}

// openMyRelay builds (and migrates) a relay process for the table; its
// relay database is the run's name with a suffix, dropped by cleanup.
func openMyRelay(ctx context.Context, r *myRun, tg *target, o Options, t myTable, ordering bool) (*app.App, func(), error) {
	cfg := &config.Config{
		RelaySchema: r.name + "_r" + t.name[strings.LastIndexByte(t.name, '_')+1:],
		Admin:       config.Admin{Listen: "off"},
		Log:         config.Log{Level: "warn"},
		Databases:   map[string]config.Database{"bench": {Driver: "mysql", DSN: r.relayDSN, MaxConns: o.maxConns()}},
		Sinks:       map[string]config.Sink{tg.kind: tg.sink},
		Sources:     []config.Source{t.source(r.name, tg.topic, o.BatchSize, o.Pipeline, ordering)},
	}
	if len(o.Deliveries) > 0 {
		cfg.Sources[0].Delivery = o.Deliveries[0]
	}
	cfg.Sources[0].Shards = max(o.Shards, 1)
	cfg.ApplyDefaults()
	if err := cfg.Validate(); err != nil {
		return nil, nil, err
	}
	a, err := app.Open(ctx, cfg, o.Logger)
	if err != nil {
		return nil, nil, err
	}
	quietRegistry(a)
	cleanup := func() {
		a.Close()
		_, _ = r.db.ExecContext(context.WithoutCancel(ctx), "DROP DATABASE IF EXISTS "+cfg.RelaySchema)
	}
	if err := a.Migrate(ctx); err != nil {
		cleanup()
		return nil, nil, err
	}
	return a, cleanup, nil
}

// measureMySQL runs fn and reads the counters around it. serverCPU, when not
// nil, is the broker's CPU time so far.
func measureMySQL(ctx context.Context, r *myRun, serverCPU func() time.Duration, fn func() (int, error)) (Measure, error) {
	brokerCPU := func() time.Duration {
		if serverCPU == nil {
			return 0
		}
		return serverCPU()
	}
	redo0 := redoWritten(ctx, r.db)
	stmts0, xacts0 := myStmts.stmts.Load(), myStmts.xacts.Load()
	cpu0, db0, br0 := selfCPU(), mariadbCPU(), brokerCPU()
	n, elapsed, cut, err := measured(fn)
	if err != nil {
		return Measure{}, err
	}
	cpu, dbc, brc := selfCPU()-cpu0, mariadbCPU()-db0, brokerCPU()-br0
	stmts, xacts := myStmts.stmts.Load()-stmts0, myStmts.xacts.Load()-xacts0
	redo := redoWritten(ctx, r.db) - redo0
	ev := float64(max(n, 1))
	return Measure{
		Events: n, Seconds: elapsed.Seconds(), EventsPerSec: float64(n) / elapsed.Seconds(), CutShort: cut,
		CPUMsPer1k:        float64(cpu.Milliseconds()) / ev * 1000,
		MariaDBCPUMs1k:    float64(dbc.Milliseconds()) / ev * 1000,
		BrokerCPUMs1k:     float64(brc.Milliseconds()) / ev * 1000,
		RedoBytesPerEvent: float64(redo) / ev,
		XactsPerEvent:     float64(xacts) / ev,
		StmtsPerEvent:     float64(stmts) / ev,
	}, nil
}
