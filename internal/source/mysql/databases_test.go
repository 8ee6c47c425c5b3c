package mysql_test

import (
	"context"
	"slices"
	"testing"

	"github.com/outbox-relay/outbox-relay/internal/mytest"
	"github.com/outbox-relay/outbox-relay/internal/source/driver"
	"github.com/outbox-relay/outbox-relay/internal/source/mysql"
)

// TestDatabaseNames: a DSN's database is named and replaced; the server's
// databases are listed without the system schemas and the relay database,
// or as a query returns them.
func TestDatabaseNames(t *testing.T) {
	t.Parallel()
	dsn := "relay:pw@tcp(db:3306)/tenant_1?timeout=5s"
	if got, err := mysql.DatabaseName(dsn); err != nil || got != "tenant_1" {
		t.Errorf("DatabaseName = %q, %v", got, err)
	}
	if _, err := mysql.DatabaseName("relay@tcp(db:3306)/"); err == nil {
		t.Error("DatabaseName of a DSN naming no database: no error")
	}
	other, err := mysql.WithDatabase(dsn, "tenant_2")
	if err != nil {
		t.Fatal(err)
	}
	if got, _ := mysql.DatabaseName(other); got != "tenant_2" || other != "relay:pw@tcp(db:3306)/tenant_2?timeout=5s" {
		t.Errorf("WithDatabase = %q", other)
	}

	a, _ := mytest.NewDatabase(t, "outbox_tenant")
	b, _ := mytest.NewDatabase(t, "outbox_tenant")
	relay, _ := mytest.NewDatabase(t, "outbox_relay")
	ctx := context.Background()
	all, err := mysql.ListDatabases(ctx, driver.ListParams{DSN: mytest.AdminDSN(), RelaySchema: relay})
	if err != nil {
		t.Fatal(err)
	}
	if !slices.Contains(all, a) || !slices.Contains(all, b) || slices.Contains(all, relay) ||
		slices.Contains(all, "mysql") || slices.Contains(all, "information_schema") {
		t.Errorf("ListDatabases = %v, want %s and %s, neither the relay's %s nor system schemas", all, a, b, relay)
	}
	got, err := mysql.ListDatabases(ctx, driver.ListParams{DSN: mytest.AdminDSN(), RelaySchema: relay,
		Query: "SELECT SCHEMA_NAME, 1 FROM information_schema.SCHEMATA WHERE SCHEMA_NAME IN ('" + a + "', '" + relay + "', 'mysql')"})
	if err != nil || !slices.Equal(got, []string{a}) {
		t.Errorf("ListDatabases by query = %v, %v; want [%s]", got, err, a)
	}
	if _, err := mysql.ListDatabases(ctx, driver.ListParams{DSN: mytest.AdminDSN(), Query: "SELECT nope"}); err == nil {
		t.Error("a failing query: no error")
	}
}
