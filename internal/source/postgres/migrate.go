package postgres

import (
	"context"
	"database/sql"
	"errors"
	"fmt"
	"io/fs"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgconn"
	"github.com/jackc/pgx/v5/stdlib"
	"github.com/pressly/goose/v3"
	"github.com/pressly/goose/v3/lock"

	"github.com/outbox-relay/outbox-relay/migrations"

	"github.com/outbox-relay/outbox-relay/internal/source"
)

// MigrationStatus is one migration and whether it is applied.
type MigrationStatus = source.MigrationStatus

// Migrator applies the relay's embedded migrations to its own schema. The
// SQL runs with search_path set to that schema; goose keeps its version table
// there too. A session advisory lock keeps replicas from migrating at once.
type Migrator struct {
	db     *sql.DB
	schema string
	prov   *goose.Provider
}

// NewMigrator opens a connection for migrating schema in the database at dsn.
func NewMigrator(dsn, schema string) (*Migrator, error) {
	cfg, err := pgx.ParseConfig(dsn)
	if err != nil {
		return nil, fmt.Errorf("parse dsn: %w", err)
	}
	cfg.RuntimeParams["search_path"] = QuoteIdent(schema)
	db := stdlib.OpenDB(*cfg)
	fsys, err := fs.Sub(migrations.Postgres, "postgres")
	if err != nil {
		return nil, err
	}
	locker, err := lock.NewPostgresSessionLocker()
	if err != nil {
		return nil, err
	}
	prov, err := goose.NewProvider(goose.DialectPostgres, db, fsys,
		goose.WithTableName(schema+".goose_db_version"),
		goose.WithSessionLocker(locker),
		goose.WithDisableGlobalRegistry(true),
	)
	if err != nil {
		_ = db.Close()
		return nil, fmt.Errorf("load migrations: %w", err)
	}
	return &Migrator{db: db, schema: schema, prov: prov}, nil
}

// Close releases the connection.
func (m *Migrator) Close() error { return m.db.Close() }

// Up creates the schema if needed and applies every pending migration.
func (m *Migrator) Up(ctx context.Context) error {
	// CREATE SCHEMA IF NOT EXISTS needs CREATE on the database even when the
	// schema exists; a least-privilege role is given its schema instead.
	var exists bool
	if err := m.db.QueryRowContext(ctx, "SELECT EXISTS (SELECT 1 FROM pg_namespace WHERE nspname = $1)", m.schema).Scan(&exists); err != nil {
		return fmt.Errorf("look up schema %s: %w", m.schema, err)
	}
	if !exists {
		// Replicas starting together race here: a concurrent creation fails
		// with a unique violation, which is as good as success.
		if _, err := m.db.ExecContext(ctx, "CREATE SCHEMA IF NOT EXISTS "+QuoteIdent(m.schema)); err != nil {
			if pgErr, ok := errors.AsType[*pgconn.PgError](err); !ok || (pgErr.Code != "23505" && pgErr.Code != "42P06") {
				return fmt.Errorf("create schema %s: %w", m.schema, err)
			}
		}
	}
	if _, err := m.prov.Up(ctx); err != nil {
		return fmt.Errorf("migrate up: %w", err)
	}
	return nil
}

// Down rolls back the newest migration; with all set it rolls back every one
// and drops the (then empty) schema.
func (m *Migrator) Down(ctx context.Context, all bool) error {
	if !all {
		if _, err := m.prov.Down(ctx); err != nil {
			return fmt.Errorf("migrate down: %w", err)
		}
		return nil
	}
	if _, err := m.prov.DownTo(ctx, 0); err != nil {
		return fmt.Errorf("migrate down: %w", err)
	}
	// Only goose's version table is left; RESTRICT refuses if anything else is.
	if _, err := m.db.ExecContext(ctx, "DROP TABLE IF EXISTS "+QuoteIdent(m.schema)+".goose_db_version"); err != nil {
		return fmt.Errorf("drop version table: %w", err)
	}
	if _, err := m.db.ExecContext(ctx, "DROP SCHEMA IF EXISTS "+QuoteIdent(m.schema)+" RESTRICT"); err != nil {
		return fmt.Errorf("drop schema %s: %w", m.schema, err)
	}
	return nil
}

// Status lists every known migration and whether it is applied.
func (m *Migrator) Status(ctx context.Context) ([]MigrationStatus, error) {
	var exists bool
	if err := m.db.QueryRowContext(ctx, "SELECT EXISTS (SELECT 1 FROM pg_namespace WHERE nspname = $1)", m.schema).Scan(&exists); err != nil {
		return nil, fmt.Errorf("migration status: %w", err)
	}
	var out []MigrationStatus
	if !exists {
		for _, s := range m.prov.ListSources() {
			out = append(out, MigrationStatus{Version: s.Version, Name: s.Path})
		}
		return out, nil
	}
	st, err := m.prov.Status(ctx)
	if err != nil {
		return nil, fmt.Errorf("migration status: %w", err)
	}
	for _, s := range st {
		out = append(out, MigrationStatus{Version: s.Source.Version, Name: s.Source.Path, Applied: s.State == goose.StateApplied})
	}
	return out, nil
}
