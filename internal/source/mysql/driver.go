package mysql

import (
	"context"
	"database/sql"
	"errors"
	"fmt"

	"github.com/outbox-relay/outbox-relay/internal/layout"
	"github.com/outbox-relay/outbox-relay/internal/lease"
	"github.com/outbox-relay/outbox-relay/internal/source"
	"github.com/outbox-relay/outbox-relay/internal/source/driver"
)

// This file is the driver adapter: the only place where internal/app's
// seam (package driver) calls this package's functions.

// Driver is the MySQL and MariaDB driver.
type Driver struct{}

var _ driver.Driver = Driver{}

// Open opens the pool of a MySQL or MariaDB database. Its connections'
// wait_timeout is p.ClaimTimeout (the shortest claim_timeout of the
// database's sources): a claim whose relay stopped talking is rolled back
// by the server after that long.
func (Driver) Open(ctx context.Context, p driver.OpenParams) (driver.DB, error) {
	pool, err := OpenWith(p.DSN, ConnOptions{ClaimTimeout: p.ClaimTimeout, Owner: p.Owner})
	if err != nil {
		return nil, &driver.FieldError{Field: "dsn", Err: err}
	}
	pool.SetMaxOpenConns(p.MaxConns)
	if err := pool.PingContext(ctx); err != nil {
		_ = pool.Close()
		return nil, fmt.Errorf("connect: %w", err)
	}
	// One per database and owner, shared by its sources: each holds a
	// connection for its liveness lock.
	return &adaptedDB{db: pool, relayDB: p.RelaySchema, leases: NewLeases(pool, p.RelaySchema, p.Owner)}, nil
}

// NewMigrator returns the migrator of the relay database.
func (Driver) NewMigrator(dsn, relaySchema string) (driver.Migrator, error) {
	return NewMigrator(dsn, relaySchema)
}

// MigrateTable creates or upgrades a managed outbox table.
func (Driver) MigrateTable(ctx context.Context, dsn string, t driver.TableName, queue bool) error {
	if queue {
		return errors.New("a dispatch queue (preset payment-queue) needs PostgreSQL")
	}
	return MigrateTable(ctx, dsn, Table(t))
}

var _ driver.Enumerator = Driver{}

// DatabaseName is the database dsn connects to.
func (Driver) DatabaseName(dsn string) (string, error) { return DatabaseName(dsn) }

// WithDatabase returns dsn connecting to database name instead.
func (Driver) WithDatabase(dsn, name string) (string, error) { return WithDatabase(dsn, name) }

// ListDatabases lists the databases of the server p.DSN connects to.
func (Driver) ListDatabases(ctx context.Context, p driver.ListParams) ([]string, error) {
	return ListDatabases(ctx, p)
}

// adaptedDB is an open MySQL or MariaDB database.
type adaptedDB struct {
	db      *sql.DB
	relayDB string
	leases  *Leases
}

var (
	_ driver.Leaser        = (*adaptedDB)(nil)
	_ driver.DeadLetters   = (*adaptedDB)(nil)
	_ driver.StatusReader  = (*adaptedDB)(nil)
	_ driver.SchemaChecker = (*adaptedDB)(nil)
)

func (db *adaptedDB) Ping(ctx context.Context) error { return db.db.PingContext(ctx) }

// Close gives up the liveness lock, then the connections.
func (db *adaptedDB) Close() error {
	return errors.Join(db.leases.Close(), db.db.Close())
}

func (db *adaptedDB) Leases() *lease.Leases { return db.leases.Leases }

func (db *adaptedDB) Table(ctx context.Context, name driver.TableName) (driver.Table, error) {
	t := Table(name)
	if err := t.Validate(); err != nil {
		return nil, err
	}
	cols, err := Columns(ctx, db.db, t)
	if err != nil {
		return nil, fmt.Errorf("table: %w", err)
	}
	return &adaptedTable{db: db, t: t, cols: cols}, nil
}

func (db *adaptedDB) ListFailed(ctx context.Context, f source.DLQFilter) ([]source.FailedEvent, error) {
	return ListFailed(ctx, db.db, db.relayDB, f)
}

func (db *adaptedDB) PurgeDead(ctx context.Context, ids []string, actor string) (int, error) {
	return PurgeDead(ctx, db.db, db.relayDB, ids, actor)
}

func (db *adaptedDB) Status(ctx context.Context) ([]source.Recorded, error) {
	return Status(ctx, db.db, db.relayDB)
}

func (db *adaptedDB) Replicas(ctx context.Context) ([]source.Replica, error) {
	return Replicas(ctx, db.db, db.relayDB)
}

func (db *adaptedDB) RecordSamples(ctx context.Context, xs []source.Sample) error {
	return RecordSamples(ctx, db.db, db.relayDB, xs)
}

func (db *adaptedDB) Samples(ctx context.Context) ([]source.Sample, error) {
	return Samples(ctx, db.db, db.relayDB)
}

func (db *adaptedDB) CheckRelaySchema(ctx context.Context) ([]string, error) {
	return CheckRelayDatabase(ctx, db.db, db.relayDB)
}

func (db *adaptedDB) CanMigrate(ctx context.Context) (bool, error) {
	return CanMigrate(ctx, db.db, db.relayDB)
}

// adaptedTable is an outbox table of a MySQL or MariaDB database.
type adaptedTable struct {
	db   *adaptedDB
	t    Table
	cols []layout.Column
}

var (
	_ driver.Retainer         = (*adaptedTable)(nil)
	_ driver.PrivilegeChecker = (*adaptedTable)(nil)
)

func (t *adaptedTable) Name() driver.TableName   { return driver.TableName(t.t) }
func (t *adaptedTable) String() string           { return t.t.String() }
func (t *adaptedTable) Columns() []layout.Column { return t.cols }

// StatementOrder: rows of one multi-row INSERT share what orders them
// unless the table records an order.
func (t *adaptedTable) StatementOrder() bool { return false }

func (t *adaptedTable) Open(ctx context.Context, p driver.SourceParams) (source.Store, error) {
	if p.Capture == driver.CaptureCursor {
		return nil, errors.New("capture: cursor reads PostgreSQL's transaction snapshots; MySQL and MariaDB tables are polled")
	}
	index, err := ClaimIndex(ctx, t.db.db, t.t, p.Layout)
	if err != nil {
		return nil, fmt.Errorf("table: %w", err)
	}
	pending, err := PendingIndex(ctx, t.db.db, t.t, p.Layout)
	if err != nil {
		return nil, fmt.Errorf("table: %w", err)
	}
	opts := Options{Source: p.Source, Table: t.t, RelayDatabase: t.db.relayDB, Layout: p.Layout,
		Ordering: p.Ordering, ClaimTimeout: p.ClaimTimeout, ClaimIndex: index, PendingIndex: pending, Bucket: p.Bucket, Priority: p.Priority}
	if err := opts.Validate(); err != nil {
		return nil, err
	}
	return New(t.db.db, opts), nil
}

func (t *adaptedTable) Purge(ctx context.Context, p driver.PurgeParams) (source.PurgeResult, error) {
	res, err := Purge(ctx, t.db.db, PurgeParams{Source: p.Source, Table: t.t, RelayDatabase: t.db.relayDB, Layout: p.Layout, PurgeOptions: p.PurgeOptions})
	return res, err
}

func (t *adaptedTable) Optimize(ctx context.Context) (driver.OptimizeReport, error) {
	res, err := Optimize(ctx, t.db.db, t.t)
	return driver.OptimizeReport{SizeBefore: res.Before.Total(), SizeAfter: res.After.Total(), Live: res.After.Rows, Took: res.Took,
		Rebuilt: true, FreeBefore: res.Before.FreeBytes, FreeAfter: res.After.FreeBytes}, err
}

func (t *adaptedTable) CheckPrivileges(ctx context.Context, need []string, updateCols ...string) (driver.Privileges, error) {
	p, err := CheckPrivileges(ctx, t.db.db, t.t, need, updateCols...)
	return driver.Privileges{Missing: p.Missing, Extra: p.Extra}, err
}
