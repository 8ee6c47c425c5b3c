package mysql

import (
	"context"
	"database/sql"
	"errors"
	"fmt"
	"io/fs"
	"time"

	gomysql "github.com/go-sql-driver/mysql"
	"github.com/pressly/goose/v3"

	"github.com/outbox-relay/outbox-relay/migrations"

	"github.com/outbox-relay/outbox-relay/internal/source"
)

// MigrationStatus is one migration and whether it is applied.
type MigrationStatus = source.MigrationStatus

// Migrator applies the relay's embedded migrations to its own database.
// The SQL runs with that database as the connection's; goose keeps its
// version table there too. A named lock (GET_LOCK) keeps replicas from
// migrating at once.
type Migrator struct {
	admin *sql.DB // no default database: creates and drops the relay's
	db    *sql.DB // the relay database as default
	name  string
	prov  *goose.Provider
}

// NewMigrator opens connections for migrating relayDB on the server at dsn
// (whatever database the DSN names is not touched).
func NewMigrator(dsn, relayDB string) (*Migrator, error) {
	if relayDB == "" {
		relayDB = DefaultRelayDatabase
	}
	if err := ValidateIdent("relay_database", relayDB); err != nil {
		return nil, err
	}
	cfg, err := gomysql.ParseDSN(dsn)
	if err != nil {
		return nil, fmt.Errorf("parse mysql dsn: %w", err)
	}
	cfg.DBName = ""
	admin, err := Open(cfg.FormatDSN())
	if err != nil {
		return nil, err
	}
	cfg.DBName = relayDB
	db, err := Open(cfg.FormatDSN())
	if err != nil {
		_ = admin.Close()
		return nil, err
	}
	m := &Migrator{admin: admin, db: db, name: relayDB}
	if m.prov, err = m.provider(); err != nil {
		_ = m.Close()
		return nil, err
	}
	return m, nil
}

// provider loads the migrations. A new one is made after the database is
// dropped: goose remembers that it made its version table.
func (m *Migrator) provider() (*goose.Provider, error) {
	fsys, err := fs.Sub(migrations.MySQL, "mysql")
	if err != nil {
		return nil, err
	}
	prov, err := goose.NewProvider(goose.DialectMySQL, m.db, fsys,
		goose.WithTableName("goose_db_version"),
		goose.WithSessionLocker(namedLocker{name: "outbox-relay migrate " + m.name}),
		goose.WithDisableGlobalRegistry(true),
	)
	if err != nil {
		return nil, fmt.Errorf("load migrations: %w", err)
	}
	return prov, nil
}

// Close releases the connections.
func (m *Migrator) Close() error { return errors.Join(m.db.Close(), m.admin.Close()) }

func (m *Migrator) exists(ctx context.Context) (bool, error) {
	var n int
	err := m.admin.QueryRowContext(ctx, "SELECT COUNT(*) FROM information_schema.SCHEMATA WHERE SCHEMA_NAME = ?", m.name).Scan(&n)
	if err != nil {
		return false, fmt.Errorf("look up database %s: %w", m.name, err)
	}
	return n > 0, nil
}

// Up creates the relay database if needed and applies every pending
// migration.
func (m *Migrator) Up(ctx context.Context) error {
	ok, err := m.exists(ctx)
	if err != nil {
		return err
	}
	// CREATE DATABASE needs the CREATE privilege even when the database
	// exists; a least-privilege user is given its database instead.
	if !ok {
		if _, err := m.admin.ExecContext(ctx, "CREATE DATABASE IF NOT EXISTS "+QuoteIdent(m.name)+
			" CHARACTER SET utf8mb4 COLLATE utf8mb4_bin"); err != nil {
			return fmt.Errorf("create database %s: %w", m.name, err)
		}
	}
	if _, err := m.prov.Up(ctx); err != nil {
		return fmt.Errorf("migrate up: %w", err)
	}
	return nil
}

// Down rolls back the newest migration; with all set it rolls back every
// one and drops the relay database when nothing else is left in it.
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
	if _, err := m.admin.ExecContext(ctx, "DROP TABLE IF EXISTS "+QuoteIdent(m.name)+".goose_db_version"); err != nil {
		return fmt.Errorf("drop version table: %w", err)
	}
	var left int
	if err := m.admin.QueryRowContext(ctx, "SELECT COUNT(*) FROM information_schema.TABLES WHERE TABLE_SCHEMA = ?", m.name).Scan(&left); err != nil {
		return fmt.Errorf("look into database %s: %w", m.name, err)
	}
	if left > 0 {
		return fmt.Errorf("database %s still holds %d other tables; not dropped", m.name, left)
	}
	// Pooled connections to the database are closed first: a server may
	// refuse to drop a database that is some session's default.
	m.db.SetMaxIdleConns(0)
	if _, err := m.admin.ExecContext(ctx, "DROP DATABASE IF EXISTS "+QuoteIdent(m.name)); err != nil {
		return fmt.Errorf("drop database %s: %w", m.name, err)
	}
	prov, err := m.provider()
	if err != nil {
		return err
	}
	m.prov = prov
	return nil
}

// Status lists every known migration and whether it is applied.
func (m *Migrator) Status(ctx context.Context) ([]MigrationStatus, error) {
	ok, err := m.exists(ctx)
	if err != nil {
		return nil, err
	}
	var out []MigrationStatus
	if !ok {
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

// namedLocker is a goose session locker on a server-wide named lock.
type namedLocker struct{ name string }

func (l namedLocker) SessionLock(ctx context.Context, conn *sql.Conn) error {
	for {
		var got sql.NullInt64
		if err := conn.QueryRowContext(ctx, "SELECT GET_LOCK(?, 5)", l.name).Scan(&got); err != nil {
			return fmt.Errorf("take migration lock: %w", err)
		}
		if got.Valid && got.Int64 == 1 {
			return nil
		}
		select {
		case <-ctx.Done():
			return fmt.Errorf("take migration lock: %w", ctx.Err())
		case <-time.After(100 * time.Millisecond):
		}
	}
}

func (l namedLocker) SessionUnlock(ctx context.Context, conn *sql.Conn) error {
	if _, err := conn.ExecContext(ctx, "DO RELEASE_LOCK(?)", l.name); err != nil {
		return fmt.Errorf("release migration lock: %w", err)
	}
	return nil
}
