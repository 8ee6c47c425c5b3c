package postgres

import (
	"context"
	"database/sql"
	"fmt"
	"hash/fnv"
	"io/fs"
	"regexp"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/stdlib"
	"github.com/pressly/goose/v3"
	"github.com/pressly/goose/v3/lock"

	"github.com/outbox-relay/outbox-relay/migrations/kafkaoutbox"
)

// plainIdent is what a managed table's schema and name must be: its version
// table and indexes are named after it without quoting.
var plainIdent = regexp.MustCompile(`^[a-z_][a-z0-9_]{0,62}$`)

// TableMigrator creates and upgrades an outbox table the relay owns (the
// kafka_outbox table of preset kafka-outbox) in the application's schema.
// Its goose version table sits beside it, named <table>_goose_version, so
// that the table's history travels with the application's schema and not
// with the relay's. A session advisory lock derived from the table's name
// keeps replicas from migrating it at once.
type TableMigrator struct {
	db    *sql.DB
	table Table
	prov  *goose.Provider
}

// NewTableMigrator opens a connection for migrating table t in the
// database at dsn.
func NewTableMigrator(dsn string, t Table) (*TableMigrator, error) {
	for _, id := range []string{t.Schema, t.Name} {
		if !plainIdent.MatchString(id) {
			return nil, fmt.Errorf("managed table %s: %q must be a plain lower-case identifier", t, id)
		}
	}
	cfg, err := pgx.ParseConfig(dsn)
	if err != nil {
		return nil, fmt.Errorf("parse dsn: %w", err)
	}
	cfg.RuntimeParams["search_path"] = QuoteIdent(t.Schema)
	fsys, err := tableMigrations(t)
	if err != nil {
		return nil, fmt.Errorf("managed table %s: %w", t, err)
	}
	h := fnv.New64a()
	_, _ = h.Write([]byte("outbox-relay managed table " + t.String()))
	locker, err := lock.NewPostgresSessionLocker(lock.WithLockID(int64(h.Sum64() >> 1)))
	if err != nil {
		return nil, err
	}
	db := stdlib.OpenDB(*cfg)
	prov, err := goose.NewProvider(goose.DialectPostgres, db, fsys,
		goose.WithTableName(t.Schema+"."+t.Name+"_goose_version"),
		goose.WithSessionLocker(locker),
		goose.WithDisableGlobalRegistry(true),
	)
	if err != nil {
		_ = db.Close()
		return nil, fmt.Errorf("managed table %s: load migrations: %w", t, err)
	}
	return &TableMigrator{db: db, table: t, prov: prov}, nil
}

// tableMigrations fills the placeholders of the embedded migrations for t.
func tableMigrations(t Table) (fs.FS, error) {
	return kafkaoutbox.Files("postgres", t.String(), t.Name)
}

// Close releases the connection.
func (m *TableMigrator) Close() error { return m.db.Close() }

// Up applies every pending migration of the table. The table's schema must
// exist (it is the application's).
func (m *TableMigrator) Up(ctx context.Context) error {
	if _, err := m.prov.Up(ctx); err != nil {
		return fmt.Errorf("migrate managed table %s: %w", m.table, err)
	}
	return nil
}

// Status lists the table's migrations and whether each is applied.
func (m *TableMigrator) Status(ctx context.Context) ([]MigrationStatus, error) {
	st, err := m.prov.Status(ctx)
	if err != nil {
		return nil, fmt.Errorf("managed table %s: migration status: %w", m.table, err)
	}
	out := make([]MigrationStatus, 0, len(st))
	for _, s := range st {
		out = append(out, MigrationStatus{Version: s.Source.Version, Name: s.Source.Path, Applied: s.State == goose.StateApplied})
	}
	return out, nil
}

// MigrateTable applies the migrations of the managed table t in the database
// at dsn.
func MigrateTable(ctx context.Context, dsn string, t Table) error {
	m, err := NewTableMigrator(dsn, t)
	if err != nil {
		return err
	}
	defer m.Close()
	return m.Up(ctx)
}
