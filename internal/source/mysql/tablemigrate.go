package mysql

import (
	"context"
	"errors"
	"fmt"
	"io/fs"
	"regexp"

	gomysql "github.com/go-sql-driver/mysql"
	"github.com/pressly/goose/v3"

	"github.com/outbox-relay/outbox-relay/migrations/kafkaoutbox"

	"github.com/outbox-relay/outbox-relay/internal/source/migrate"
)

// plainIdent is what a managed table's database and name must be: its
// version table and index are named after it, and the migrations look it up
// in the catalogue by that name.
var plainIdent = regexp.MustCompile(`^[a-z_][a-z0-9_]{0,41}$`)

// TableMigrator creates and upgrades an outbox table the relay owns (the
// kafka_outbox table of preset kafka-outbox) in the application's database.
// Its goose version table sits beside it, named <table>_goose_version. A
// named lock derived from the table's name keeps replicas from migrating it
// at once.
type TableMigrator = migrate.Table

// NewTableMigrator opens connections for migrating table t on the server
// at dsn. t.Schema is the table's database; empty means the one the DSN
// names.
func NewTableMigrator(dsn string, t Table) (*TableMigrator, error) {
	for _, id := range []string{t.Schema, t.Name} {
		if id != "" && !plainIdent.MatchString(id) {
			return nil, fmt.Errorf("managed table %s: %q must be a plain lower-case identifier of at most 42 characters", t, id)
		}
	}
	if t.Name == "" {
		return nil, errors.New("managed table: no name")
	}
	cfg, err := gomysql.ParseDSN(dsn)
	if err != nil {
		return nil, fmt.Errorf("parse mysql dsn: %w", err)
	}
	if t.Schema != "" {
		cfg.DBName = t.Schema
	}
	if cfg.DBName == "" {
		return nil, fmt.Errorf("managed table %s: neither the table nor the DSN names a database", t)
	}
	schema := cfg.DBName
	fsys, err := tableMigrations(t.Name)
	if err != nil {
		return nil, fmt.Errorf("managed table %s: %w", t, err)
	}
	db, err := Open(cfg.FormatDSN())
	if err != nil {
		return nil, err
	}
	return migrate.NewTable(migrate.Spec{
		Dialect:      goose.DialectMySQL,
		DB:           db,
		FS:           fsys,
		VersionTable: t.Name + "_goose_version",
		Locker:       namedLocker{name: "outbox-relay table " + schema + "." + t.Name},
	}, Table{Schema: schema, Name: t.Name}.String(), db.Close)
}

// tableMigrations fills the placeholders of the embedded migrations for the
// table named name, in the connection's database.
func tableMigrations(name string) (fs.FS, error) {
	return kafkaoutbox.Files("mysql", QuoteIdent(name), name)
}

// MigrateTable applies the migrations of the managed table t on the server
// at dsn (t.Schema empty: the DSN's database).
func MigrateTable(ctx context.Context, dsn string, t Table) error {
	m, err := NewTableMigrator(dsn, t)
	return migrate.Apply(ctx, m, err)
}
