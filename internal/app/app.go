// Package app assembles a relay process from its configuration: database
// pools, the relay's schema, sinks, sources (listed or discovered), their
// workers (one a shard: a source, or each bucket of a source split by
// sources[].shards, under a lease of its own), the notification listeners
// and the admin server.
package app

import (
	"cmp"
	"context"
	"errors"
	"fmt"
	"log/slog"
	"math/rand/v2"
	"os"
	"slices"
	"sync"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/collectors"
	"github.com/twmb/franz-go/pkg/kgo"

	"github.com/outbox-relay/outbox-relay/internal/config"
	"github.com/outbox-relay/outbox-relay/internal/layout"
	"github.com/outbox-relay/outbox-relay/internal/lease"
	"github.com/outbox-relay/outbox-relay/internal/metrics"
	"github.com/outbox-relay/outbox-relay/internal/relay"
	"github.com/outbox-relay/outbox-relay/internal/sink"
	"github.com/outbox-relay/outbox-relay/internal/sink/breaker"
	"github.com/outbox-relay/outbox-relay/internal/source"
	"github.com/outbox-relay/outbox-relay/internal/source/driver"
)

// App is one relay process.
type App struct {
	cfg     *config.Config
	log     *slog.Logger
	reg     *prometheus.Registry
	metrics *metrics.Metrics
	owner   string
	// dbs are the open databases, by name, whatever their driver.
	dbs map[string]driver.DB
	// leases are each database's lease table for this process.
	leases map[string]*lease.Leases
	// balancers share each database's sources among the replicas (Run
	// sets it).
	balancers *balancers
	// schedulers hand each database's claims out by priority, in turns.
	schedulers map[string]*relay.Scheduler

	kgoOpts       []kgo.Opt
	tracer        any
	statsInterval time.Duration
	historyEvery  time.Duration // the console's chart resolution
	history       *history

	mu        sync.Mutex
	closed    bool // Close has run
	adminAddr string
	sinks     map[string]sink.Publisher
	running   map[string]*runningSource
}

// Option adjusts an App.
type Option func(*App)

// WithHistoryInterval sets the resolution of the console's charts (default
// 10s; an hour of samples is kept).
func WithHistoryInterval(d time.Duration) Option {
	return func(a *App) { a.historyEvery = d }
}

// WithStatsInterval sets how often sources refresh relay_state and their
// backlog gauges (default 15s).
func WithStatsInterval(d time.Duration) Option {
	return func(a *App) { a.statsInterval = d }
}

// WithKafkaOptions passes extra franz-go options to every Kafka sink (tests
// and benchmarks tune metadata refreshes with it).
func WithKafkaOptions(opts ...kgo.Opt) Option {
	return func(a *App) { a.kgoOpts = append(a.kgoOpts, opts...) }
}

// WithQueryTracer traces every statement of the relay's database
// connections where the driver can (the benchmark counts them with it): a
// pgx.QueryTracer for PostgreSQL; one that also implements pgx.BatchTracer
// sees each statement of a batch.
func WithQueryTracer(t any) Option {
	return func(a *App) { a.tracer = t }
}

// Config is the configuration the relay runs with.
func (a *App) Config() *config.Config { return a.cfg }

// Open connects to every database of cfg. It does not migrate or start
// anything.
func Open(ctx context.Context, cfg *config.Config, log *slog.Logger, opts ...Option) (*App, error) {
	if log == nil {
		log = slog.New(slog.DiscardHandler)
	}
	reg := prometheus.NewRegistry()
	reg.MustRegister(collectors.NewGoCollector(), collectors.NewProcessCollector(collectors.ProcessCollectorOpts{}))
	host, _ := os.Hostname()
	a := &App{
		cfg: cfg, log: log, reg: reg, metrics: metrics.New(reg),
		owner: fmt.Sprintf("%s/%d/%04x", host, os.Getpid(), rand.N(1<<16)),
		dbs:   map[string]driver.DB{}, sinks: map[string]sink.Publisher{}, running: map[string]*runningSource{},
		leases: map[string]*lease.Leases{}, schedulers: map[string]*relay.Scheduler{},
	}
	for _, o := range opts {
		o(a)
	}
	reg.MustRegister(metrics.NewStateCollector(a.sourceStates))
	for name, db := range cfg.Databases {
		if err := a.openDB(ctx, name, db); err != nil {
			a.Close()
			return nil, err
		}
	}
	return a, nil
}

// Registry is the Prometheus registry of this process.
func (a *App) Registry() *prometheus.Registry { return a.reg }

// Published is how many events this process has published, over every
// source.
func (a *App) Published() int { return int(a.metrics.PublishedTotal()) }

// Migrate applies the relay's migrations in every database, then those of
// the outbox tables the relay manages (manage_table).
func (a *App) Migrate(ctx context.Context) error {
	for name := range a.cfg.Databases {
		m, err := NewMigrator(a.cfg, name)
		if err != nil {
			return err
		}
		applied, err := Up(ctx, m)
		_ = m.Close()
		if err != nil {
			return fmt.Errorf("databases.%s: %w", name, err)
		}
		for _, s := range applied {
			a.log.Info("migration applied", "database", name, "version", s.Version, "name", s.Name)
		}
		if err := MigrateTables(ctx, a.cfg, name); err != nil {
			return err
		}
	}
	return nil
}

// Migrator applies the relay's own migrations to one database.
type Migrator = driver.Migrator

// Up applies m's pending migrations and returns those it applied.
func Up(ctx context.Context, m Migrator) ([]source.MigrationStatus, error) {
	before, err := m.Status(ctx)
	if err != nil {
		return nil, err
	}
	if err := m.Up(ctx); err != nil {
		return nil, err
	}
	after, err := m.Status(ctx)
	if err != nil {
		return nil, err
	}
	return changed(before, after), nil
}

// Down rolls back m's newest migration, or every one with all, and returns
// those it rolled back, newest first.
func Down(ctx context.Context, m Migrator, all bool) ([]source.MigrationStatus, error) {
	before, err := m.Status(ctx)
	if err != nil {
		return nil, err
	}
	if err := m.Down(ctx, all); err != nil {
		return nil, err
	}
	after, err := m.Status(ctx)
	if err != nil {
		return nil, err
	}
	undone := changed(before, after)
	slices.Reverse(undone)
	return undone, nil
}

// changed lists the migrations whose applied state differs between two
// listings, in version order.
func changed(before, after []source.MigrationStatus) []source.MigrationStatus {
	was := map[int64]bool{}
	for _, s := range before {
		was[s.Version] = s.Applied
	}
	var out []source.MigrationStatus
	for _, s := range after {
		if was[s.Version] != s.Applied {
			out = append(out, s)
		}
	}
	return out
}

// NewMigrator returns the migrator of database name, for its driver.
func NewMigrator(cfg *config.Config, name string) (Migrator, error) {
	db := cfg.Databases[name]
	d, err := driverOf(name, db)
	if err != nil {
		return nil, err
	}
	m, err := d.NewMigrator(db.DSN, cfg.RelaySchema)
	if err != nil {
		return nil, fmt.Errorf("databases.%s: %w", name, err)
	}
	return m, nil
}

// MigrateTables creates or upgrades, in database db, the outbox tables of
// the sources whose manage_table is on.
func MigrateTables(ctx context.Context, cfg *config.Config, db string) error {
	for i, s := range cfg.Sources {
		if s.Database != db || s.ManageTable == nil || !*s.ManageTable || s.Table == "" {
			continue
		}
		schema, table, err := layout.ParseTableName(s.Table)
		if err != nil {
			return fmt.Errorf("sources[%d].table: %w", i, err)
		}
		d, err := driverOf(db, cfg.Databases[db])
		if err != nil {
			return err
		}
		t := driver.TableName{Schema: schema, Name: table}
		if err := d.MigrateTable(ctx, cfg.Databases[db].DSN, t, s.Preset == config.QueuePreset); err != nil {
			return fmt.Errorf("sources[%d]: %w", i, err)
		}
	}
	return nil
}

// sink returns the named sink, connecting on first use.
func (a *App) sink(name string) (sink.Publisher, error) {
	a.mu.Lock()
	defer a.mu.Unlock()
	if s, ok := a.sinks[name]; ok {
		return s, nil
	}
	sc, ok := a.cfg.Sinks[name]
	if !ok {
		return nil, fmt.Errorf("unknown sink %q", name)
	}
	inner, err := a.newSink(name, sc)
	if err != nil {
		return nil, fmt.Errorf("sinks.%s: %w", name, err)
	}
	gauge := a.metrics.SinkCircuit.WithLabelValues(name)
	gauge.Set(0)
	p := breaker.New(inner, breaker.Options{Name: name, Timeout: sc.Timeout.D(), Failures: sc.Circuit.Failures,
		Cooldown: sc.Circuit.Cooldown.D(), MaxCooldown: sc.Circuit.MaxCooldown.D(),
		OnState: func(s breaker.State) { gauge.Set(float64(s)) }, Logger: a.log})
	a.sinks[name] = p
	return p, nil
}

// Close releases every connection; sinks flush first.
func (a *App) Close() {
	a.mu.Lock()
	defer a.mu.Unlock()
	if a.closed {
		return
	}
	a.closed = true
	// Sinks flush concurrently, within the shutdown timeout whatever the
	// brokers do.
	ctx, cancel := context.WithTimeout(context.Background(), cmp.Or(a.cfg.Shutdown.Timeout.D(), config.DefaultShutdownTimeout))
	defer cancel()
	var wg sync.WaitGroup
	for name, s := range a.sinks {
		wg.Go(func() {
			if err := s.Close(ctx); err != nil {
				a.log.Warn("close sink", "sink", name, "err", err)
			}
		})
	}
	wg.Wait()
	a.sinks = map[string]sink.Publisher{}
	for _, db := range a.dbs {
		_ = db.Close()
	}
}

// ready lists readiness checks: each database, each sink, each source.
func (a *App) ready(ctx context.Context) map[string]error {
	out := map[string]error{}
	for name, db := range a.dbs {
		out["database:"+name] = db.Ping(ctx)
	}
	a.mu.Lock()
	for name, s := range a.sinks {
		if p, ok := s.(interface{ Ping(context.Context) error }); ok {
			out["sink:"+name] = p.Ping(ctx)
		}
	}
	if len(a.running) == 0 {
		out["sources"] = errors.New("no source is running yet")
	}
	a.mu.Unlock()
	// A source this process relays, or stands by for, is ready unless it
	// is stuck; its check says why.
	for name, c := range a.conditions(time.Now()) {
		var err error
		if c.State == StateStuck {
			err = fmt.Errorf("%s (%s): %s", c.State, c.Cause, c.Reason)
		}
		out["source:"+name] = err
	}
	return out
}

// PingSink connects to the named sink and checks that it answers.
func (a *App) PingSink(ctx context.Context, name string) error {
	s, err := a.sink(name)
	if err != nil {
		return err
	}
	p, ok := s.(interface{ Ping(context.Context) error })
	if !ok {
		return nil
	}
	return p.Ping(ctx)
}

// AdminAddr is the admin server's address once Run listens ("" before).
func (a *App) AdminAddr() string {
	a.mu.Lock()
	defer a.mu.Unlock()
	return a.adminAddr
}

// RelaySchema is the schema of the relay's own tables.
func (a *App) RelaySchema() string { return a.cfg.RelaySchema }
