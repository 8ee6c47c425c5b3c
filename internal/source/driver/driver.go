// Package driver is the seam between the relay's wiring (internal/app) and
// the database dialects. A Driver opens a DB from a database's
// configuration; a DB finds a source's Table; a Table opens the source's
// Store. What every dialect must do is in those three interfaces; what only
// some can do (LISTEN/NOTIFY, discovery, dead letters, retention, ...) is a
// capability in caps.go, which the wiring discovers by interface assertion.
//
// Each dialect registers its driver under the name a configuration gives
// as databases.<name>.driver; package internal/source/all registers the
// built-in ones, so that the wiring imports no dialect.
package driver

import (
	"context"
	"fmt"
	"log/slog"
	"slices"
	"sync"
	"time"

	"github.com/outbox-relay/outbox-relay/internal/layout"
	"github.com/outbox-relay/outbox-relay/internal/metrics"
	"github.com/outbox-relay/outbox-relay/internal/source"
)

// Driver opens the databases of one dialect.
type Driver interface {
	// Open connects to a database and checks that it answers. An error
	// about a configuration field is a *FieldError.
	Open(ctx context.Context, p OpenParams) (DB, error)
	// NewMigrator returns the migrator of the relay's own tables in the
	// database dsn names.
	NewMigrator(dsn, relaySchema string) (Migrator, error)
	// MigrateTable creates or upgrades an outbox table the relay manages
	// (sources[].manage_table); queue says the source is a dispatch queue
	// (preset payment-queue) rather than the relay's own outbox table.
	MigrateTable(ctx context.Context, dsn string, t TableName, queue bool) error
}

// OpenParams are what Open needs of a database's configuration.
type OpenParams struct {
	DSN         string
	MaxConns    int
	RelaySchema string // the relay's schema (a database on MySQL)
	// Owner names this relay process (leases, connection names).
	Owner string
	// ClaimTimeout is the shortest claim_timeout of the database's
	// sources; zero when none sets one.
	ClaimTimeout time.Duration
	// Tracer, when set, traces every statement where the dialect can (a
	// pgx.QueryTracer on PostgreSQL); other dialects ignore it.
	Tracer any
}

// DB is one open database: its connections and the relay's schema in it.
type DB interface {
	// Table looks an outbox table up and reads its columns. An error
	// starts with the configuration field it is about ("table: ...").
	Table(ctx context.Context, t TableName) (Table, error)
	Ping(ctx context.Context) error
	// Close releases the database's connections and whatever this process
	// holds in it (leases).
	Close() error
}

// TableName names a table as configuration writes it; an empty Schema
// is the connection's default.
type TableName struct {
	Schema, Name string
}

// Table is an outbox table found in a database, its columns read.
type Table interface {
	Name() TableName
	// String is the name quoted as the database writes it.
	String() string
	Columns() []layout.Column
	// StatementOrder says whether the store claims the rows one
	// transaction wrote in the order of its statements (see
	// layout.OrderGap).
	StatementOrder() bool
	// Open builds the store of a source on this table. An error starts
	// with the configuration field it is about ("layout.xxx: ...").
	Open(ctx context.Context, p SourceParams) (source.Store, error)
}

// SourceParams configure the store of one source.
type SourceParams struct {
	Source string // the source's name
	// Capture is how the store finds rows (sources[].capture): "" or
	// CapturePoll claims pending rows, CaptureCursor reads an append-only
	// table from a position (PostgreSQL), its layout untouched (see
	// layout.MergeUntouched).
	Capture      string
	Layout       *layout.Layout
	Ordering     bool
	ClaimTimeout time.Duration
	// Bucket is the part of the source the store claims (sources[].shards);
	// the zero value is the whole source.
	Bucket source.Bucket
	// Priority, when set, has the claims take some rows first (see
	// source.Priority).
	Priority *source.Priority
	// Metrics is the process's metrics, for stores that keep their own
	// (a dispatch queue's).
	Metrics *metrics.Metrics
	// Logger, when set, is for stores that log on their own (capture
	// wal's stream).
	Logger *slog.Logger
}

// The capture modes a store may be opened in (SourceParams.Capture).
const (
	CapturePoll   = "poll"
	CaptureCursor = "cursor"
	CaptureWAL    = "wal"
)

// Migrator applies the relay's own migrations to one database.
type Migrator interface {
	Up(ctx context.Context) error
	// Down rolls back the newest migration, or every one (dropping the
	// relay's schema) when all is set.
	Down(ctx context.Context, all bool) error
	Status(ctx context.Context) ([]source.MigrationStatus, error)
	Close() error
}

// FieldError is an error about one field of a database's configuration
// (Field is "dsn").
type FieldError struct {
	Field string
	Err   error
}

func (e *FieldError) Error() string { return e.Field + ": " + e.Err.Error() }
func (e *FieldError) Unwrap() error { return e.Err }

var (
	mu      sync.RWMutex
	drivers = map[string]Driver{}
)

// Register makes a driver available under name; registering a name twice
// panics.
func Register(name string, d Driver) {
	mu.Lock()
	defer mu.Unlock()
	if _, dup := drivers[name]; dup {
		panic(fmt.Sprintf("driver: %q registered twice", name))
	}
	drivers[name] = d
}

// Lookup returns the driver registered under name.
func Lookup(name string) (Driver, bool) {
	mu.RLock()
	defer mu.RUnlock()
	d, ok := drivers[name]
	return d, ok
}

// Names lists the registered drivers, sorted.
func Names() []string {
	mu.RLock()
	defer mu.RUnlock()
	out := make([]string, 0, len(drivers))
	for n := range drivers {
		out = append(out, n)
	}
	slices.Sort(out)
	return out
}
