package postgres

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"regexp"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgxpool"

	"github.com/outbox-relay/outbox-relay/internal/layout"
	"github.com/outbox-relay/outbox-relay/internal/lease"
	"github.com/outbox-relay/outbox-relay/internal/source"
	"github.com/outbox-relay/outbox-relay/internal/source/driver"
)

// This file is the driver adapter: the only place where internal/app's
// seam (package driver) calls this package's functions.

// QueueMode is the dispatch queue (state mode queue) on PostgreSQL tables,
// which package queue provides: it builds on this package, so it is handed
// to NewDriver rather than imported.
type QueueMode struct {
	// Open builds the store of a queue source on table t.
	Open func(ctx context.Context, pool *pgxpool.Pool, t Table, relaySchema string, p driver.SourceParams) (source.Store, error)
	// Migrate creates or upgrades a managed queue's tables in schema.
	Migrate func(ctx context.Context, dsn, schema string) error
}

// NewDriver returns the PostgreSQL driver; q serves the sources in state
// mode queue.
func NewDriver(q QueueMode) driver.Driver { return pgDriver{queue: q} }

type pgDriver struct{ queue QueueMode }

func (d pgDriver) Open(ctx context.Context, p driver.OpenParams) (driver.DB, error) {
	pc, err := pgxpool.ParseConfig(p.DSN)
	if err != nil {
		return nil, &driver.FieldError{Field: "dsn", Err: err}
	}
	pc.MaxConns = int32(p.MaxConns)
	if t, ok := p.Tracer.(pgx.QueryTracer); ok {
		pc.ConnConfig.Tracer = t
	}
	pc.ConnConfig.RuntimeParams["application_name"] = ApplicationName(p.Owner)
	// Plan every statement for the table as it is now: a plan cached
	// while an outbox was empty (sequential scans) must not outlive the
	// backlog that follows.
	pc.ConnConfig.RuntimeParams["plan_cache_mode"] = "force_custom_plan"
	// The relay's statements take milliseconds; compiling one with JIT
	// (which a large backlog's cost estimate can trigger) takes hundreds.
	if _, set := pc.ConnConfig.RuntimeParams["jit"]; !set {
		pc.ConnConfig.RuntimeParams["jit"] = "off"
	}
	pool, err := pgxpool.NewWithConfig(ctx, pc)
	if err != nil {
		return nil, fmt.Errorf("connect: %w", err)
	}
	if err := pool.Ping(ctx); err != nil {
		pool.Close()
		return nil, fmt.Errorf("connect: %w", err)
	}
	return &pgDB{pool: pool, dsn: p.DSN, schema: p.RelaySchema, queue: d.queue,
		leases: NewLeases(pool, p.RelaySchema, p.Owner)}, nil
}

func (d pgDriver) NewMigrator(dsn, relaySchema string) (driver.Migrator, error) {
	return NewMigrator(dsn, relaySchema)
}

func (d pgDriver) MigrateTable(ctx context.Context, dsn string, t driver.TableName, queue bool) error {
	if queue {
		return d.queue.Migrate(ctx, dsn, t.Schema)
	}
	return MigrateTable(ctx, dsn, Table(t))
}

// pgDB is an open PostgreSQL database.
type pgDB struct {
	pool   *pgxpool.Pool
	dsn    string
	schema string
	queue  QueueMode
	leases *lease.Leases
}

var (
	_ driver.Leaser        = (*pgDB)(nil)
	_ driver.Discoverer    = (*pgDB)(nil)
	_ driver.Notifier      = (*pgDB)(nil)
	_ driver.DeadLetters   = (*pgDB)(nil)
	_ driver.StatusReader  = (*pgDB)(nil)
	_ driver.SchemaChecker = (*pgDB)(nil)
)

func (db *pgDB) Ping(ctx context.Context) error { return db.pool.Ping(ctx) }

func (db *pgDB) Close() error {
	db.pool.Close()
	return nil
}

func (db *pgDB) Leases() *lease.Leases { return db.leases }

func (db *pgDB) Table(ctx context.Context, name driver.TableName) (driver.Table, error) {
	t := Table(name)
	cols, err := Columns(ctx, db.pool, t)
	if err != nil {
		return nil, fmt.Errorf("table: %w", err)
	}
	return &pgTable{db: db, t: t, cols: cols}, nil
}

func (db *pgDB) Discover(ctx context.Context, re *regexp.Regexp, names []string) ([]driver.TableName, error) {
	ts, err := Discover(ctx, db.pool, re, names)
	out := make([]driver.TableName, len(ts))
	for i, t := range ts {
		out[i] = driver.TableName(t)
	}
	return out, err
}

func (db *pgDB) Listener(channel string, log *slog.Logger) driver.Listener {
	return pgListener{NewListener(db.dsn, channel, log)}
}

func (db *pgDB) ListFailed(ctx context.Context, f source.DLQFilter) ([]source.FailedEvent, error) {
	return ListFailed(ctx, db.pool, db.schema, f)
}

func (db *pgDB) PurgeDead(ctx context.Context, ids []string, actor string) (int, error) {
	return PurgeDead(ctx, db.pool, db.schema, ids, actor)
}

func (db *pgDB) Status(ctx context.Context) ([]source.Recorded, error) {
	return Status(ctx, db.pool, db.schema)
}

func (db *pgDB) CheckRelaySchema(ctx context.Context) ([]string, error) {
	return CheckRelaySchema(ctx, db.pool, db.schema)
}

func (db *pgDB) CanMigrate(ctx context.Context) (bool, error) {
	return CanMigrate(ctx, db.pool, db.schema)
}

// pgListener is a Listener that subscribes by driver.TableName.
type pgListener struct{ *Listener }

func (l pgListener) Subscribe(t driver.TableName) <-chan struct{} {
	return l.Listener.Subscribe(Table(t))
}

// pgTable is an outbox table of a PostgreSQL database.
type pgTable struct {
	db   *pgDB
	t    Table
	cols []layout.Column
}

var (
	_ driver.Retainer         = (*pgTable)(nil)
	_ driver.PrivilegeChecker = (*pgTable)(nil)
	_ driver.Triggered        = (*pgTable)(nil)
)

func (t *pgTable) Name() driver.TableName   { return driver.TableName(t.t) }
func (t *pgTable) String() string           { return t.t.String() }
func (t *pgTable) Columns() []layout.Column { return t.cols }

// StatementOrder: claims read rows in transaction (xid) and insert order.
func (t *pgTable) StatementOrder() bool { return true }

func (t *pgTable) Open(ctx context.Context, p driver.SourceParams) (source.Store, error) {
	if p.Layout.Queue != nil {
		return t.db.queue.Open(ctx, t.db.pool, t.t, t.db.schema, p)
	}
	return New(t.db.pool, Options{Source: p.Source, Table: t.t, RelaySchema: t.db.schema, Layout: p.Layout,
		Ordering: p.Ordering, ClaimTimeout: p.ClaimTimeout}), nil
}

func (t *pgTable) Purge(ctx context.Context, p driver.PurgeParams) (source.PurgeResult, error) {
	res, err := Purge(ctx, t.db.pool, PurgeParams{
		Source: p.Source, Table: t.t, RelaySchema: t.db.schema, Layout: p.Layout,
		OlderThan: p.OlderThan, IncludeDead: p.IncludeDead, DryRun: p.DryRun,
		BatchSize: p.BatchSize, Pause: p.Pause, LockTimeout: p.LockTimeout,
	})
	if errors.Is(err, ErrNoPrivilege) {
		err = driver.NoPrivilege(err)
	}
	return res, err
}

func (t *pgTable) Optimize(ctx context.Context) (driver.OptimizeReport, error) {
	res, err := Optimize(ctx, t.db.pool, t.t)
	return driver.OptimizeReport{SizeBefore: res.Before.TotalBytes, SizeAfter: res.After.TotalBytes,
		DeadBefore: res.Before.DeadTuples, DeadAfter: res.After.DeadTuples, Live: res.After.LiveTuples, Took: res.Took}, err
}

func (t *pgTable) CheckPrivileges(ctx context.Context, need []string, updateCols ...string) (driver.Privileges, error) {
	p, err := CheckPrivileges(ctx, t.db.pool, t.t, need, updateCols...)
	return driver.Privileges{Missing: p.Missing, Extra: p.Extra}, err
}

func (t *pgTable) HasTrigger(ctx context.Context) (bool, error) {
	return HasTrigger(ctx, t.db.pool, t.t, t.db.schema)
}

func (t *pgTable) CanInstallTrigger(ctx context.Context) (bool, error) {
	return CanInstallTrigger(ctx, t.db.pool, t.t)
}

func (t *pgTable) InstallTrigger(ctx context.Context) error {
	return InstallTrigger(ctx, t.db.pool, t.t, t.db.schema)
}
