package postgres_test

import (
	"context"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgxpool"

	"github.com/outbox-relay/outbox-relay/internal/pgtest"
	"github.com/outbox-relay/outbox-relay/internal/source/postgres"
	"github.com/outbox-relay/outbox-relay/internal/source/sourcetest"
)

// aclMu serialises the tests' changes to the grants on the relay schema's
// tables, which all tables of the suite share: concurrent GRANTs on one
// table fail with "tuple concurrently updated".
var aclMu sync.Mutex

// CheckAs makes a login role (no password: the local server trusts),
// grants it g and USAGE on the schemas and on the relay schema's sequences,
// and reports what check finds for it. What the role was granted, then the
// role, are dropped when the test ends.
func (tb *pgTable) CheckAs(t *testing.T, g sourcetest.Grants) sourcetest.PrivilegeReport {
	t.Helper()
	ctx := context.Background()
	admin := tb.h.pool
	role := "st_role_" + pgtest.Suffix()
	ident := pgx.Identifier{role}.Sanitize()
	pgtest.Exec(t, admin, "CREATE ROLE "+ident+" LOGIN")
	t.Cleanup(func() {
		ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
		defer cancel()
		aclMu.Lock()
		defer aclMu.Unlock()
		if _, err := admin.Exec(ctx, "DROP OWNED BY "+ident+" CASCADE"); err != nil {
			t.Errorf("drop owned by %s: %v", role, err)
		}
		if _, err := admin.Exec(ctx, "DROP ROLE IF EXISTS "+ident); err != nil {
			t.Errorf("drop role %s: %v", role, err)
		}
	})
	rs := postgres.QuoteIdent(relaySchema)
	grants := []string{
		"GRANT USAGE ON SCHEMA " + postgres.QuoteIdent(tb.table.Schema) + " TO " + ident,
		"GRANT USAGE ON SCHEMA " + rs + " TO " + ident,
		"GRANT USAGE ON ALL SEQUENCES IN SCHEMA " + rs + " TO " + ident,
	}
	if len(g.Outbox) > 0 {
		grants = append(grants, "GRANT "+strings.Join(g.Outbox, ", ")+" ON "+tb.table.String()+" TO "+ident)
	}
	for table, privs := range g.Relay {
		if len(privs) > 0 {
			grants = append(grants, "GRANT "+strings.Join(privs, ", ")+" ON "+rs+"."+postgres.QuoteIdent(table)+" TO "+ident)
		}
	}
	func() {
		aclMu.Lock()
		defer aclMu.Unlock()
		pgtest.Exec(t, admin, grants...)
	}()

	pool, err := pgxpool.New(ctx, pgtest.WithUser(t, tb.h.dsn, role))
	if err != nil {
		t.Fatal(err)
	}
	defer pool.Close()
	need := tb.layout.NeededPrivileges()
	p, err := postgres.CheckPrivileges(ctx, pool, tb.table, need, tb.layout.UpdatedColumns()...)
	if err != nil {
		t.Fatalf("check privileges as %s: %v", role, err)
	}
	relay, err := postgres.CheckRelaySchema(ctx, pool, relaySchema)
	if err != nil {
		t.Fatalf("check the relay schema as %s: %v", role, err)
	}
	return sourcetest.PrivilegeReport{Need: need, Missing: p.Missing, Extra: p.Extra, RelayMissing: relay}
}
