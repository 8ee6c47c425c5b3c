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
	"maps"
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

	// dbMu guards what follows, up to balancers: the databases of
	// multi-database entries come and go while Run runs (databases.go).
	dbMu sync.RWMutex
	// dbs are the open databases, by name, whatever their driver.
	dbs map[string]driver.DB
	// leases are each database's lease table for this process.
	leases map[string]*lease.Leases
	// health is whether each database is in service, by name.
	health map[string]*dbHealth
	// members are the databases of multi-database entries this process
	// knows, by name (<entry>/<database>), and entryErrs why an entry's
	// discovery last failed.
	members   map[string]*member
	entryErrs map[string]error
	// migrating is set by Migrate: a member taken up later is migrated too.
	migrating bool
	// slots bound how many members are taken up at once.
	slots chan struct{}

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
		leases: map[string]*lease.Leases{}, health: map[string]*dbHealth{}, members: map[string]*member{},
		entryErrs: map[string]error{}, slots: make(chan struct{}, memberSlots), schedulers: map[string]*relay.Scheduler{},
	}
	for _, o := range opts {
		o(a)
	}
	reg.MustRegister(metrics.NewStateCollector(a.sourceStates))
	for _, name := range slices.Sorted(maps.Keys(cfg.Databases)) {
		if db := cfg.Databases[name]; !db.Multi() {
			if err := a.openDB(ctx, name, db); err != nil {
				a.Close()
				return nil, err
			}
		}
	}
	if err := a.openMembers(ctx); err != nil {
		a.Close()
		return nil, err
	}
	return a, nil
}

// Registry is the Prometheus registry of this process.
func (a *App) Registry() *prometheus.Registry { return a.reg }

// Published is how many events this process has published, over every
// source.
func (a *App) Published() int { return int(a.metrics.PublishedTotal()) }

// Migrate applies the relay's migrations in every database of the
// configuration, then those of the outbox tables the relay manages
// (manage_table). The databases of multi-database entries are migrated
// each as Run takes it up, so that one out of service holds up only its
// own sources.
func (a *App) Migrate(ctx context.Context) error {
	for _, name := range slices.Sorted(maps.Keys(a.cfg.Databases)) {
		if db := a.cfg.Databases[name]; !db.Multi() {
			if err := a.migrateDB(ctx, name, db); err != nil {
				return err
			}
		}
	}
	a.dbMu.Lock()
	a.migrating = true
	a.dbMu.Unlock()
	return nil
}

// migrateDB applies the relay's migrations in database name, then those
// of the outbox tables it manages.
func (a *App) migrateDB(ctx context.Context, name string, db config.Database) error {
	m, err := NewMigratorFor(a.cfg, name, db)
	if err != nil {
		return err
	}
	applied, err := Up(ctx, m)
	_ = m.Close()
	if err != nil {
		return fmt.Errorf("%s: %w", dbPath(name), err)
	}
	for _, s := range applied {
		a.log.Info("migration applied", "database", name, "version", s.Version, "name", s.Name)
	}
	return MigrateTablesOn(ctx, a.cfg, name, db)
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

// NewMigrator returns the migrator of database name of the configuration,
// for its driver.
func NewMigrator(cfg *config.Config, name string) (Migrator, error) {
	return NewMigratorFor(cfg, name, cfg.Databases[name])
}

// NewMigratorFor returns the migrator of database name, configured as db:
// a database of the configuration or a member of a multi-database entry.
func NewMigratorFor(cfg *config.Config, name string, db config.Database) (Migrator, error) {
	d, err := driverOf(name, db)
	if err != nil {
		return nil, err
	}
	m, err := d.NewMigrator(db.DSN, cfg.RelaySchema)
	if err != nil {
		return nil, fmt.Errorf("%s: %w", dbPath(name), err)
	}
	return m, nil
}

// MigrateTables creates or upgrades, in database db of the configuration,
// the outbox tables of the sources whose manage_table is on.
func MigrateTables(ctx context.Context, cfg *config.Config, db string) error {
	return MigrateTablesOn(ctx, cfg, db, cfg.Databases[db])
}

// MigrateTablesOn is MigrateTables for database name configured as db: a
// member of a multi-database entry migrates the tables of its entry's
// sources.
func MigrateTablesOn(ctx context.Context, cfg *config.Config, name string, db config.Database) error {
	for _, p := range cfg.SourcesOn(name) {
		s, i := p.Source, p.Index
		if s.ManageTable == nil || !*s.ManageTable || s.Table == "" {
			continue
		}
		schema, table, err := layout.ParseTableName(s.Table)
		if err != nil {
			return fmt.Errorf("sources[%d].table: %w", i, err)
		}
		d, err := driverOf(name, db)
		if err != nil {
			return err
		}
		t := driver.TableName{Schema: schema, Name: table}
		if err := d.MigrateTable(ctx, db.DSN, t, s.Preset == config.QueuePreset); err != nil {
			return fmt.Errorf("sources[%d] (%s): %w", i, s.Name, err)
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
	a.dbMu.Lock()
	for _, db := range a.dbs {
		_ = db.Close()
	}
	a.dbMu.Unlock()
}

// ready lists readiness checks: each database, each sink, each source. A
// database of the configuration is pinged; one of a multi-database entry
// (there may be hundreds) says what its probe last found.
func (a *App) ready(ctx context.Context) map[string]error {
	out := map[string]error{}
	a.dbMu.RLock()
	dbs, health := maps.Clone(a.dbs), maps.Clone(a.health)
	a.dbMu.RUnlock()
	for name, h := range health {
		if _, _, member := config.SplitMemberName(name); member || dbs[name] == nil {
			_, err := h.get()
			out["database:"+name] = err
		} else {
			out["database:"+name] = dbs[name].Ping(ctx)
		}
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
