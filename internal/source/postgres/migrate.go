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
	"github.com/outbox-relay/outbox-relay/internal/source/migrate"
)

// MigrationStatus is one migration and whether it is applied.
type MigrationStatus = source.MigrationStatus

// Migrator applies the relay's embedded migrations to its own schema. The
// SQL runs with search_path set to that schema; goose keeps its version table
// there too. A session advisory lock keeps replicas from migrating at once.
type Migrator = migrate.Relay

// NewMigrator opens a connection for migrating schema in the database at dsn.
func NewMigrator(dsn, schema string) (*Migrator, error) {
	cfg, err := pgx.ParseConfig(dsn)
	if err != nil {
		return nil, fmt.Errorf("parse dsn: %w", err)
	}
	cfg.RuntimeParams["search_path"] = QuoteIdent(schema)
	fsys, err := fs.Sub(migrations.Postgres, "postgres")
	if err != nil {
		return nil, err
	}
	locker, err := lock.NewPostgresSessionLocker()
	if err != nil {
		return nil, err
	}
	db := stdlib.OpenDB(*cfg)
	return migrate.NewRelay(migrate.Spec{
		Dialect:      goose.DialectPostgres,
		DB:           db,
		FS:           fsys,
		VersionTable: schema + ".goose_db_version",
		Locker:       locker,
	}, relaySchema{db: db, name: schema}, db.Close)
}

// relaySchema is the relay's schema, for the migrator.
type relaySchema struct {
	db   *sql.DB
	name string
}

func (s relaySchema) Exists(ctx context.Context) (bool, error) {
	var exists bool
	if err := s.db.QueryRowContext(ctx, "SELECT EXISTS (SELECT 1 FROM pg_namespace WHERE nspname = $1)", s.name).Scan(&exists); err != nil {
		return false, fmt.Errorf("look up schema %s: %w", s.name, err)
	}
	return exists, nil
}

// Create creates the schema. CREATE SCHEMA IF NOT EXISTS needs CREATE on the
// database even when the schema exists; a least-privilege role is given its
// schema instead, and this is not called.
func (s relaySchema) Create(ctx context.Context) error {
	// Replicas starting together race here: a concurrent creation fails
	// with a unique violation, which is as good as success.
	if _, err := s.db.ExecContext(ctx, "CREATE SCHEMA IF NOT EXISTS "+QuoteIdent(s.name)); err != nil {
		if pgErr, ok := errors.AsType[*pgconn.PgError](err); !ok || (pgErr.Code != "23505" && pgErr.Code != "42P06") {
			return fmt.Errorf("create schema %s: %w", s.name, err)
		}
	}
	return nil
}

// Drop drops goose's version table, then the schema; RESTRICT refuses if
// anything else is left in it.
func (s relaySchema) Drop(ctx context.Context) error {
	if _, err := s.db.ExecContext(ctx, "DROP TABLE IF EXISTS "+QuoteIdent(s.name)+".goose_db_version"); err != nil {
		return fmt.Errorf("drop version table: %w", err)
	}
	if _, err := s.db.ExecContext(ctx, "DROP SCHEMA IF EXISTS "+QuoteIdent(s.name)+" RESTRICT"); err != nil {
		return fmt.Errorf("drop schema %s: %w", s.name, err)
	}
	return nil
}
