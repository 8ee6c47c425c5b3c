package postgres

import (
	"context"
	"fmt"
	"hash/fnv"
	"io/fs"
	"regexp"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/stdlib"
	"github.com/pressly/goose/v3"
	"github.com/pressly/goose/v3/lock"

	"github.com/outbox-relay/outbox-relay/migrations/kafkaoutbox"

	"github.com/outbox-relay/outbox-relay/internal/source/migrate"
)

// plainIdent is what a managed table's schema and name must be: its version
// table and indexes are named after it without quoting.
var plainIdent = regexp.MustCompile(`^[a-z_][a-z0-9_]{0,62}$`)

// TableMigrator creates and upgrades an outbox table the relay owns (the
// kafka_outbox table of preset kafka-outbox) in the application's schema.
// Its goose version table sits beside it, named <table>_goose_version. A
// session advisory lock derived from the table's name keeps replicas from
// migrating it at once.
type TableMigrator = migrate.Table

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
	return migrate.NewTable(migrate.Spec{
		Dialect:      goose.DialectPostgres,
		DB:           db,
		FS:           fsys,
		VersionTable: t.Schema + "." + t.Name + "_goose_version",
		Locker:       locker,
	}, t.String(), db.Close)
}

// tableMigrations fills the placeholders of the embedded migrations for t.
func tableMigrations(t Table) (fs.FS, error) {
	return kafkaoutbox.Files("postgres", t.String(), t.Name)
}

// MigrateTable applies the migrations of the managed table t in the database
// at dsn.
func MigrateTable(ctx context.Context, dsn string, t Table) error {
	m, err := NewTableMigrator(dsn, t)
	return migrate.Apply(ctx, m, err)
}
