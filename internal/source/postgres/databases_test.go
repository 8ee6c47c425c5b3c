package postgres_test

import (
	"context"
	"slices"
	"strings"
	"testing"

	"github.com/jackc/pgx/v5/pgconn"

	"github.com/outbox-relay/outbox-relay/internal/pgtest"
	"github.com/outbox-relay/outbox-relay/internal/source/driver"
	"github.com/outbox-relay/outbox-relay/internal/source/postgres"
)

// TestDatabaseNames: a DSN's database is named and replaced, as a URL and
// as keyword/value settings; the server's databases are listed without
// its templates, or as a query returns them.
func TestDatabaseNames(t *testing.T) {
	t.Parallel()
	for _, dsn := range []string{
		"postgres://relay:pw@db:5432/tenant_1?sslmode=disable",
		"host=db user=relay dbname=tenant_1 sslmode=disable",
	} {
		if got, err := postgres.DatabaseName(dsn); err != nil || got != "tenant_1" {
			t.Errorf("DatabaseName(%q) = %q, %v", dsn, got, err)
		}
		for _, name := range []string{"tenant_2", "odd 'name'/x"} {
			other, err := postgres.WithDatabase(dsn, name)
			if err != nil {
				t.Fatal(err)
			}
			c, err := pgconn.ParseConfig(other)
			if err != nil || c.Database != name || c.User != "relay" || c.Host != "db" {
				t.Errorf("WithDatabase(%q, %q) = %q: database %q, user %q, host %q, %v", dsn, name, other, c.Database, c.User, c.Host, err)
			}
		}
	}

	dsn, pool := pgtest.NewDB(t)
	name, _ := postgres.DatabaseName(dsn)
	ctx := context.Background()
	all, err := postgres.ListDatabases(ctx, driver.ListParams{DSN: pgtest.AdminDSN()})
	if err != nil {
		t.Fatal(err)
	}
	if !slices.Contains(all, name) || slices.Contains(all, "template0") || slices.Contains(all, "template1") {
		t.Errorf("ListDatabases = %v, want %s and no template", all, name)
	}
	pgtest.Exec(t, pool, `CREATE TABLE registry (db text, active bool)`,
		`INSERT INTO registry VALUES ('tenant_a', true), ('tenant_b', false), ('tenant_c', true)`)
	got, err := postgres.ListDatabases(ctx, driver.ListParams{DSN: dsn, Query: "SELECT db, active FROM registry WHERE active ORDER BY db"})
	if err != nil || !slices.Equal(got, []string{"tenant_a", "tenant_c"}) {
		t.Errorf("ListDatabases by query = %v, %v", got, err)
	}
	if _, err := postgres.ListDatabases(ctx, driver.ListParams{DSN: dsn, Query: "SELECT 1"}); err == nil || !strings.Contains(err.Error(), "text") {
		t.Errorf("a query whose first column is not text: %v", err)
	}
}
