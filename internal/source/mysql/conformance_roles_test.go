package mysql

import (
	"context"
	"strings"
	"testing"

	gomysql "github.com/go-sql-driver/mysql"

	"github.com/outbox-relay/outbox-relay/internal/mytest"
	"github.com/outbox-relay/outbox-relay/internal/source/sourcetest"
)

// CheckAs makes a user that connects from anywhere, grants it g, and
// reports what check finds for it. The user connects with no default
// database (a user with no privilege in a database may not make it its
// default) and names the table's. The user is dropped when the test ends.
func (tb *myTable) CheckAs(t *testing.T, g sourcetest.Grants) sourcetest.PrivilegeReport {
	t.Helper()
	ctx := context.Background()
	admin := tb.h.db
	user := "st_" + mytest.Suffix()
	account := "'" + user + "'@'%'"
	mytest.Exec(t, admin, "CREATE USER "+account+" IDENTIFIED BY 'pw'")
	t.Cleanup(func() { _, _ = admin.Exec("DROP USER IF EXISTS " + account) })
	var grants []string
	if len(g.Outbox) > 0 {
		grants = append(grants, "GRANT "+strings.Join(g.Outbox, ", ")+" ON "+QuoteIdent(tb.h.appDB(t))+"."+QuoteIdent(tb.table.Name)+" TO "+account)
	}
	for table, privs := range g.Relay {
		if len(privs) > 0 {
			grants = append(grants, "GRANT "+strings.Join(privs, ", ")+" ON "+QuoteIdent(tb.h.relayDB)+"."+QuoteIdent(table)+" TO "+account)
		}
	}
	mytest.Exec(t, admin, grants...)
	cfg, err := gomysql.ParseDSN(tb.h.dsn)
	if err != nil {
		t.Fatal(err)
	}

	cfg.User, cfg.Passwd, cfg.DBName = user, "pw", ""
	db, err := Open(cfg.FormatDSN())
	if err != nil {
		t.Fatal(err)
	}
	defer db.Close()
	need := tb.layout.NeededPrivileges()
	p, err := CheckPrivileges(ctx, db, Table{Schema: tb.h.appDB(t), Name: tb.table.Name}, need, tb.layout.UpdatedColumns()...)
	if err != nil {
		t.Fatalf("check privileges as %s: %v", user, err)
	}
	relay, err := CheckRelayDatabase(ctx, db, tb.h.relayDB)
	if err != nil {
		t.Fatalf("check the relay database as %s: %v", user, err)
	}
	return sourcetest.PrivilegeReport{Need: need, Missing: p.Missing, Extra: p.Extra, RelayMissing: relay}
}

// appDB is the database the harness's DSN names, which holds its tables.
func (h *myHarness) appDB(t *testing.T) string {
	t.Helper()
	cfg, err := gomysql.ParseDSN(h.dsn)
	if err != nil {
		t.Fatal(err)
	}
	return cfg.DBName
}
