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
	for _, layout := range o.Layouts {
		for _, ordering := range o.Orderings {
			err := eachDelivery(&o, func(od Options) error {
				res, err := drainMySQL(ctx, r, od, k, layout, ordering)
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

// drainMySQL measures the ceiling and the relay on a prefilled backlog, as
// drain does on PostgreSQL.
func drainMySQL(ctx context.Context, r *myRun, o Options, k kafkaEnv, layout string, ordering bool) (Result, error) {
	t := newMyTable(layout)
	res := Result{Workload: "drain", Driver: "mysql", Layout: layout, Ordering: ordering, Delivery: firstOr(o.Deliveries, config.DeliveryAtLeastOnce), Rows: o.Rows, Keys: o.Keys, BatchSize: o.BatchSize, Pipeline: o.Pipeline}
	if err := t.create(ctx, r.db); err != nil {
		return res, err
	}
	defer t.drop(context.WithoutCancel(ctx), r.db)
	tg, err := newTarget(ctx, o, k)
	if err != nil {
		return res, err
	}
	defer tg.close()
	res.Sink, res.SinkNote = tg.kind, tg.note
	progress(o, "sink %s: %s", tg.kind, tg.note)
	a, cleanup, err := openMyRelay(ctx, r, tg, o, t, ordering)
	if err != nil {
		return res, err
	}
	defer cleanup()

	progress(o, "%s/drain ordering=%v: prefilling %d rows", layout, ordering, o.Rows)
	if err := t.fill(ctx, r.db, tg.topic, o.Rows, o.Keys, o.PayloadBytes); err != nil {
		return res, err
	}
	srcs, err := a.Resolve(ctx)
	if err != nil {
		return res, err
	}
	res.Ceiling, err = measureMySQL(ctx, r, nil, func() (int, error) { return ceiling(ctx, srcs[0].Store, o, layout) })
	if err != nil {
		return res, fmt.Errorf("ceiling: %w", err)
	}
	progress(o, "%s ordering=%v: ceiling %.0f events/s; prefilling again", layout, ordering, res.Ceiling.EventsPerSec)
	if err := t.reset(ctx, r.db); err != nil {
		return res, err
	}
	if err := t.fill(ctx, r.db, tg.topic, o.Rows, o.Keys, o.PayloadBytes); err != nil {
		return res, err
	}
	if o.RelayProfile != nil {
		if err := pprof.StartCPUProfile(o.RelayProfile); err != nil {
			return res, err
		}
	}
	res.Relay, err = measureMySQL(ctx, r, tg.cpu, func() (int, error) { return relay(ctx, a, o, layout) })
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

// keysMySQL drains a backlog with ordering on over keys keys and checks
// per-key order with a consumer, as keysRun does on PostgreSQL.
func keysMySQL(ctx context.Context, r *myRun, o Options, k kafkaEnv, keys int) (Result, error) {
	t := newMyTable("delete")
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
	if err := t.fill(ctx, r.db, tg.topic, o.Rows, keys, o.PayloadBytes); err != nil {
		return res, err
	}
	oc, err := newOrderChecker(ctx, k.brokers)
	if err != nil {
		return res, err
	}
	defer oc.stop()
	res.Relay, err = measureMySQL(ctx, r, tg.cpu, func() (int, error) { return relay(ctx, a, o, "delete") })
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
		Databases:   map[string]config.Database{"bench": {Driver: "mysql", DSN: r.relayDSN, MaxConns: o.Pipeline + 4}},
		Sinks:       map[string]config.Sink{tg.kind: tg.sink},
		Sources:     []config.Source{t.source(r.name, tg.topic, o.BatchSize, o.Pipeline, ordering)},
	}
	if len(o.Deliveries) > 0 {
		cfg.Sources[0].Delivery = o.Deliveries[0]
	}
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
	cpu0, db0, br0, start := selfCPU(), mariadbCPU(), brokerCPU(), time.Now()
	n, err := fn()
	if err != nil {
		return Measure{}, err
	}
	elapsed := time.Since(start)
	cpu, dbc, brc := selfCPU()-cpu0, mariadbCPU()-db0, brokerCPU()-br0
	stmts, xacts := myStmts.stmts.Load()-stmts0, myStmts.xacts.Load()-xacts0
	redo := redoWritten(ctx, r.db) - redo0
	ev := float64(max(n, 1))
	return Measure{
		Events: n, Seconds: elapsed.Seconds(), EventsPerSec: float64(n) / elapsed.Seconds(),
		CPUMsPer1k:        float64(cpu.Milliseconds()) / ev * 1000,
		MariaDBCPUMs1k:    float64(dbc.Milliseconds()) / ev * 1000,
		BrokerCPUMs1k:     float64(brc.Milliseconds()) / ev * 1000,
		RedoBytesPerEvent: float64(redo) / ev,
		XactsPerEvent:     float64(xacts) / ev,
		StmtsPerEvent:     float64(stmts) / ev,
	}, nil
}
