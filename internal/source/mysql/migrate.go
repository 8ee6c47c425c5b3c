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
	"github.com/outbox-relay/outbox-relay/internal/source/migrate"
)

// MigrationStatus is one migration and whether it is applied.
type MigrationStatus = source.MigrationStatus

// Migrator applies the relay's embedded migrations to its own database.
// The SQL runs with that database as the connection's; goose keeps its
// version table there too. A named lock (GET_LOCK) keeps replicas from
// migrating at once.
type Migrator = migrate.Relay

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
	fsys, err := fs.Sub(migrations.MySQL, "mysql")
	if err != nil {
		return nil, err
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
	return migrate.NewRelay(migrate.Spec{
		Dialect:      goose.DialectMySQL,
		DB:           db,
		FS:           fsys,
		VersionTable: "goose_db_version",
		Locker:       namedLocker{name: "outbox-relay migrate " + relayDB},
	}, relayDatabase{admin: admin, db: db, name: relayDB}, func() error { return errors.Join(db.Close(), admin.Close()) })
}

// relayDatabase is the relay's database, for the migrator.
type relayDatabase struct {
	admin *sql.DB // no default database: creates and drops the relay's
	db    *sql.DB // the relay database as default
	name  string
}

func (d relayDatabase) Exists(ctx context.Context) (bool, error) {
	var n int
	err := d.admin.QueryRowContext(ctx, "SELECT COUNT(*) FROM information_schema.SCHEMATA WHERE SCHEMA_NAME = ?", d.name).Scan(&n)
	if err != nil {
		return false, fmt.Errorf("look up database %s: %w", d.name, err)
	}
	return n > 0, nil
}

// Create creates the database. CREATE DATABASE needs the CREATE privilege
// even when the database exists; a least-privilege user is given its
// database instead, and this is not called.
func (d relayDatabase) Create(ctx context.Context) error {
	if _, err := d.admin.ExecContext(ctx, "CREATE DATABASE IF NOT EXISTS "+QuoteIdent(d.name)+
		" CHARACTER SET utf8mb4 COLLATE utf8mb4_bin"); err != nil {
		return fmt.Errorf("create database %s: %w", d.name, err)
	}
	return nil
}

// Drop drops goose's version table, then the database when nothing else is
// left in it.
func (d relayDatabase) Drop(ctx context.Context) error {
	if _, err := d.admin.ExecContext(ctx, "DROP TABLE IF EXISTS "+QuoteIdent(d.name)+".goose_db_version"); err != nil {
		return fmt.Errorf("drop version table: %w", err)
	}
	var left int
	if err := d.admin.QueryRowContext(ctx, "SELECT COUNT(*) FROM information_schema.TABLES WHERE TABLE_SCHEMA = ?", d.name).Scan(&left); err != nil {
		return fmt.Errorf("look into database %s: %w", d.name, err)
	}
	if left > 0 {
		return fmt.Errorf("database %s still holds %d other tables; not dropped", d.name, left)
	}
	// Pooled connections to the database are closed first: a server may
	// refuse to drop a database that is some session's default.
	d.db.SetMaxIdleConns(0)
	if _, err := d.admin.ExecContext(ctx, "DROP DATABASE IF EXISTS "+QuoteIdent(d.name)); err != nil {
		return fmt.Errorf("drop database %s: %w", d.name, err)
	}
	return nil
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
