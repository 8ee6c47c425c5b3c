// Package migrate runs a store's embedded goose migrations: the relay's own
// schema (Relay) and the outbox tables the relay owns (Table). What is the
// same for every database lives here (up, down one step or all, status,
// the errors); a dialect supplies the goose dialect, the migrations, the
// connection, the lock that keeps replicas from migrating at once, and for
// the relay's schema how to see, create and drop it.
package migrate

import (
	"context"
	"database/sql"
	"fmt"
	"io/fs"

	"github.com/pressly/goose/v3"
	"github.com/pressly/goose/v3/lock"

	"github.com/outbox-relay/outbox-relay/internal/source"
)

// Spec is what a dialect supplies to run one set of migrations.
type Spec struct {
	Dialect goose.Dialect
	// DB is the connection the migrations run on.
	DB *sql.DB
	// FS holds the migration files at its root.
	FS fs.FS
	// VersionTable is goose's version table, as goose is to name it.
	VersionTable string
	// Locker is held while migrations run.
	Locker lock.SessionLocker
}

// provider loads the migrations of s.
func (s Spec) provider() (*goose.Provider, error) {
	prov, err := goose.NewProvider(s.Dialect, s.DB, s.FS,
		goose.WithTableName(s.VersionTable),
		goose.WithSessionLocker(s.Locker),
		goose.WithDisableGlobalRegistry(true),
	)
	if err != nil {
		return nil, fmt.Errorf("load migrations: %w", err)
	}
	return prov, nil
}

// applied lists goose's status as the relay shows it.
func applied(st []*goose.MigrationStatus) []source.MigrationStatus {
	out := make([]source.MigrationStatus, 0, len(st))
	for _, s := range st {
		out = append(out, source.MigrationStatus{Version: s.Source.Version, Name: s.Source.Path, Applied: s.State == goose.StateApplied})
	}
	return out
}

// Schema is where the relay's migrations keep their tables: a schema on
// PostgreSQL, a database on MySQL.
type Schema interface {
	// Exists reports whether it exists.
	Exists(ctx context.Context) (bool, error)
	// Create creates it; it is called only when it does not exist (creating
	// one that exists may need a privilege the relay's role lacks).
	Create(ctx context.Context) error
	// Drop drops goose's version table, then the schema itself, once every
	// migration is rolled back; it refuses when anything else is left.
	Drop(ctx context.Context) error
}

// Relay applies the relay's embedded migrations to its own schema.
type Relay struct {
	spec   Spec
	schema Schema
	close  func() error
	prov   *goose.Provider
}

// NewRelay loads the migrations of spec, kept in schema. close releases
// the dialect's connections; it is called by Close, and here when the
// migrations cannot be loaded.
func NewRelay(spec Spec, schema Schema, close func() error) (*Relay, error) {
	prov, err := spec.provider()
	if err != nil {
		if close != nil {
			_ = close()
		}
		return nil, err
	}
	return &Relay{spec: spec, schema: schema, close: close, prov: prov}, nil
}

// Close releases the connections.
func (r *Relay) Close() error {
	if r.close == nil {
		return nil
	}
	return r.close()
}

// Up creates the schema if needed and applies every pending migration.
func (r *Relay) Up(ctx context.Context) error {
	ok, err := r.schema.Exists(ctx)
	if err != nil {
		return err
	}
	if !ok {
		if err := r.schema.Create(ctx); err != nil {
			return err
		}
	}
	if _, err := r.prov.Up(ctx); err != nil {
		return fmt.Errorf("migrate up: %w", err)
	}
	return nil
}

// Down rolls back the newest migration; with all set it rolls back every
// one and drops the (then empty) schema.
func (r *Relay) Down(ctx context.Context, all bool) error {
	if !all {
		if _, err := r.prov.Down(ctx); err != nil {
			return fmt.Errorf("migrate down: %w", err)
		}
		return nil
	}
	if _, err := r.prov.DownTo(ctx, 0); err != nil {
		return fmt.Errorf("migrate down: %w", err)
	}
	if err := r.schema.Drop(ctx); err != nil {
		return err
	}
	// A new provider: goose remembers that it made its version table.
	prov, err := r.spec.provider()
	if err != nil {
		return err
	}
	r.prov = prov
	return nil
}

// Status lists every known migration and whether it is applied; before the
// schema exists, none is.
func (r *Relay) Status(ctx context.Context) ([]source.MigrationStatus, error) {
	ok, err := r.schema.Exists(ctx)
	if err != nil {
		return nil, fmt.Errorf("migration status: %w", err)
	}
	if !ok {
		var out []source.MigrationStatus
		for _, s := range r.prov.ListSources() {
			out = append(out, source.MigrationStatus{Version: s.Version, Name: s.Path})
		}
		return out, nil
	}
	st, err := r.prov.Status(ctx)
	if err != nil {
		return nil, fmt.Errorf("migration status: %w", err)
	}
	return applied(st), nil
}
