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
func NewDriver(q QueueMode) driver.Driver { return adaptedDriver{queue: q} }

type adaptedDriver struct{ queue QueueMode }

func (d adaptedDriver) Open(ctx context.Context, p driver.OpenParams) (driver.DB, error) {
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
	return &adaptedDB{pool: pool, dsn: p.DSN, schema: p.RelaySchema, queue: d.queue,
		leases: NewLeases(pool, p.RelaySchema, p.Owner)}, nil
}

func (d adaptedDriver) NewMigrator(dsn, relaySchema string) (driver.Migrator, error) {
	return NewMigrator(dsn, relaySchema)
}

func (d adaptedDriver) MigrateTable(ctx context.Context, dsn string, t driver.TableName, queue bool) error {
	if queue {
		return d.queue.Migrate(ctx, dsn, t.Schema)
	}
	return MigrateTable(ctx, dsn, Table(t))
}

var _ driver.Enumerator = adaptedDriver{}

func (adaptedDriver) DatabaseName(dsn string) (string, error) { return DatabaseName(dsn) }

func (adaptedDriver) WithDatabase(dsn, name string) (string, error) { return WithDatabase(dsn, name) }

func (adaptedDriver) ListDatabases(ctx context.Context, p driver.ListParams) ([]string, error) {
	return ListDatabases(ctx, p)
}

// adaptedDB is an open PostgreSQL database.
type adaptedDB struct {
	pool   *pgxpool.Pool
	dsn    string
	schema string
	queue  QueueMode
	leases *lease.Leases
}

var (
	_ driver.Leaser        = (*adaptedDB)(nil)
	_ driver.Discoverer    = (*adaptedDB)(nil)
	_ driver.Notifier      = (*adaptedDB)(nil)
	_ driver.DeadLetters   = (*adaptedDB)(nil)
	_ driver.StatusReader  = (*adaptedDB)(nil)
	_ driver.SchemaChecker = (*adaptedDB)(nil)
)

func (db *adaptedDB) Ping(ctx context.Context) error { return db.pool.Ping(ctx) }

func (db *adaptedDB) Close() error {
	db.pool.Close()
	return nil
}

func (db *adaptedDB) Leases() *lease.Leases { return db.leases }

func (db *adaptedDB) Table(ctx context.Context, name driver.TableName) (driver.Table, error) {
	t := Table(name)
	cols, err := Columns(ctx, db.pool, t)
	if err != nil {
		return nil, fmt.Errorf("table: %w", err)
	}
	return &adaptedTable{db: db, t: t, cols: cols}, nil
}

func (db *adaptedDB) Discover(ctx context.Context, re *regexp.Regexp, names []string) ([]driver.TableName, error) {
	ts, err := Discover(ctx, db.pool, re, names)
	out := make([]driver.TableName, len(ts))
	for i, t := range ts {
		out[i] = driver.TableName(t)
	}
	return out, err
}

func (db *adaptedDB) Listener(channel string, log *slog.Logger) driver.Listener {
	return adaptedListener{NewListener(db.dsn, channel, log)}
}

func (db *adaptedDB) ListFailed(ctx context.Context, f source.DLQFilter) ([]source.FailedEvent, error) {
	return ListFailed(ctx, db.pool, db.schema, f)
}

func (db *adaptedDB) PurgeDead(ctx context.Context, ids []string, actor string) (int, error) {
	return PurgeDead(ctx, db.pool, db.schema, ids, actor)
}

func (db *adaptedDB) Status(ctx context.Context) ([]source.Recorded, error) {
	return Status(ctx, db.pool, db.schema)
}

func (db *adaptedDB) Replicas(ctx context.Context) ([]source.Replica, error) {
	return Replicas(ctx, db.pool, db.schema)
}

func (db *adaptedDB) RecordSamples(ctx context.Context, xs []source.Sample) error {
	return RecordSamples(ctx, db.pool, db.schema, xs)
}

func (db *adaptedDB) Samples(ctx context.Context) ([]source.Sample, error) {
	return Samples(ctx, db.pool, db.schema)
}

func (db *adaptedDB) CheckRelaySchema(ctx context.Context) ([]string, error) {
	return CheckRelaySchema(ctx, db.pool, db.schema)
}

func (db *adaptedDB) CanMigrate(ctx context.Context) (bool, error) {
	return CanMigrate(ctx, db.pool, db.schema)
}

// adaptedListener is a Listener that subscribes by driver.TableName.
type adaptedListener struct{ *Listener }

func (l adaptedListener) Subscribe(t driver.TableName) <-chan struct{} {
	return l.Listener.Subscribe(Table(t))
}

func (l adaptedListener) SubscribeLeases() <-chan struct{} { return l.Listener.subscribe(LeasePayload) }

// adaptedTable is an outbox table of a PostgreSQL database.
type adaptedTable struct {
	db   *adaptedDB
	t    Table
	cols []layout.Column
}

var (
	_ driver.Retainer         = (*adaptedTable)(nil)
	_ driver.PrivilegeChecker = (*adaptedTable)(nil)
	_ driver.Triggered        = (*adaptedTable)(nil)
)

func (t *adaptedTable) Name() driver.TableName   { return driver.TableName(t.t) }
func (t *adaptedTable) String() string           { return t.t.String() }
func (t *adaptedTable) Columns() []layout.Column { return t.cols }

// StatementOrder: claims read rows in transaction (xid) and insert order.
func (t *adaptedTable) StatementOrder() bool { return true }

func (t *adaptedTable) Open(ctx context.Context, p driver.SourceParams) (source.Store, error) {
	if err := p.Bucket.Validate(); err != nil {
		return nil, fmt.Errorf("shards: %w", err)
	}
	if p.Capture == driver.CaptureCursor {
		if p.Bucket.Split() {
			return nil, errors.New("shards: capture cursor keeps one position per source; it is not split")
		}
		return OpenCursor(ctx, t.db.pool, t.t, t.cols, CursorOptions{Source: p.Source, RelaySchema: t.db.schema,
			Layout: p.Layout, Ordering: p.Ordering, ClaimTimeout: p.ClaimTimeout})
	}
	if p.Capture == driver.CaptureWAL {
		return t.openWAL(ctx, p)
	}
	if p.Layout.Queue != nil {
		if p.Bucket.Split() {
			return nil, errors.New("shards: a queue (state mode queue) is not split")
		}
		return t.db.queue.Open(ctx, t.db.pool, t.t, t.db.schema, p)
	}
	return New(t.db.pool, Options{Source: p.Source, Table: t.t, RelaySchema: t.db.schema, Layout: p.Layout,
		Ordering: p.Ordering, ClaimTimeout: p.ClaimTimeout, Bucket: p.Bucket, Priority: p.Priority}), nil
}

func (t *adaptedTable) Purge(ctx context.Context, p driver.PurgeParams) (source.PurgeResult, error) {
	res, err := Purge(ctx, t.db.pool, PurgeParams{Source: p.Source, Table: t.t, RelaySchema: t.db.schema, Layout: p.Layout, PurgeOptions: p.PurgeOptions})
	return res, err
}

func (t *adaptedTable) Optimize(ctx context.Context) (driver.OptimizeReport, error) {
	res, err := Optimize(ctx, t.db.pool, t.t)
	return driver.OptimizeReport{SizeBefore: res.Before.TotalBytes, SizeAfter: res.After.TotalBytes,
		DeadBefore: res.Before.DeadTuples, DeadAfter: res.After.DeadTuples, Live: res.After.LiveTuples, Took: res.Took}, err
}

func (t *adaptedTable) CheckPrivileges(ctx context.Context, need []string, updateCols ...string) (driver.Privileges, error) {
	p, err := CheckPrivileges(ctx, t.db.pool, t.t, need, updateCols...)
	return driver.Privileges{Missing: p.Missing, Extra: p.Extra}, err
}

func (t *adaptedTable) HasTrigger(ctx context.Context) (bool, error) {
	return HasTrigger(ctx, t.db.pool, t.t, t.db.schema)
}

func (t *adaptedTable) CanInstallTrigger(ctx context.Context) (bool, error) {
	return CanInstallTrigger(ctx, t.db.pool, t.t)
}

func (t *adaptedTable) InstallTrigger(ctx context.Context) error {
	return InstallTrigger(ctx, t.db.pool, t.t, t.db.schema)
}
