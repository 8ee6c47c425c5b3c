package source_test

import (
	"errors"
	"fmt"
	"slices"
	"testing"

	"github.com/outbox-relay/outbox-relay/internal/source"
)

func set(privs ...string) map[string]bool {
	m := map[string]bool{}
	for _, p := range privs {
		m[p] = true
	}
	return m
}

func TestComparePrivileges(t *testing.T) {
	t.Parallel()
	kinds := []string{"SELECT", "INSERT", "UPDATE", "DELETE", "TRUNCATE"}
	written := []string{"published", "published_at"}
	for _, tc := range []struct {
		name          string
		need, cols    []string
		g             source.Granted
		missing, more []string
	}{
		{name: "exactly what is needed", need: []string{"SELECT", "UPDATE"}, cols: written,
			g: source.Granted{Table: set("SELECT", "UPDATE")}},
		{name: "nothing granted", need: []string{"SELECT", "UPDATE"}, cols: written,
			missing: []string{"SELECT", "UPDATE"}},
		{name: "no UPDATE", need: []string{"SELECT", "UPDATE"}, cols: written,
			g: source.Granted{Table: set("SELECT")}, missing: []string{"UPDATE"}},
		{name: "delete layout without DELETE", need: []string{"SELECT", "UPDATE", "DELETE"},
			g: source.Granted{Table: set("SELECT", "UPDATE")}, missing: []string{"DELETE"}},
		{name: "more than needed", need: []string{"SELECT", "UPDATE"},
			g:    source.Granted{Table: set("SELECT", "INSERT", "UPDATE", "DELETE", "TRUNCATE")},
			more: []string{"INSERT", "DELETE", "TRUNCATE"}},
		{name: "UPDATE on each written column", need: []string{"SELECT", "UPDATE"}, cols: written,
			g: source.Granted{Table: set("SELECT"), Columns: map[string]map[string]bool{
				"published": set("UPDATE"), "published_at": set("UPDATE")}}},
		{name: "UPDATE on some written columns", need: []string{"SELECT", "UPDATE"}, cols: written,
			g: source.Granted{Table: set("SELECT"), Columns: map[string]map[string]bool{
				"published": set("UPDATE"), "payload": set("UPDATE")}},
			missing: []string{"UPDATE"}},
		{name: "column UPDATE without written columns named", need: []string{"SELECT", "UPDATE"},
			g:       source.Granted{Table: set("SELECT"), Columns: map[string]map[string]bool{"published": set("UPDATE")}},
			missing: []string{"UPDATE"}},
		{name: "column INSERT is more than needed", need: []string{"SELECT", "UPDATE"},
			g:    source.Granted{Table: set("SELECT", "UPDATE"), Columns: map[string]map[string]bool{"payload": set("INSERT")}},
			more: []string{"INSERT"}},
		{name: "INSERT on some column, as the database says", need: []string{"SELECT"},
			g:    source.Granted{Table: set("SELECT"), AnyColumn: set("INSERT", "UPDATE")},
			more: []string{"INSERT", "UPDATE"}},
		{name: "a kind the database does not know is not reported", need: []string{"SELECT", "UPDATE"},
			g: source.Granted{Table: set("SELECT", "UPDATE", "DROP")}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			p := source.ComparePrivileges(kinds, tc.need, tc.cols, tc.g)
			if !slices.Equal(p.Missing, tc.missing) || !slices.Equal(p.Extra, tc.more) {
				t.Errorf("missing %v, more %v; want missing %v, more %v", p.Missing, p.Extra, tc.missing, tc.more)
			}
		})
	}
}

func TestRelayTables(t *testing.T) {
	t.Parallel()
	need := map[string][]string{}
	for _, rt := range source.RelayTables() {
		need[rt.Name] = rt.Privileges
	}
	// What retention and dlq purge do on the dead-letter tables.
	for table, privs := range map[string][]string{
		"failed_events":      {"SELECT", "INSERT", "UPDATE", "DELETE"},
		"failed_event_audit": {"SELECT", "INSERT", "DELETE"},
		"retry_state":        {"SELECT", "INSERT", "UPDATE", "DELETE"},
		"goose_db_version":   {"SELECT"},
	} {
		for _, p := range privs {
			if !slices.Contains(need[table], p) {
				t.Errorf("%s needs %v, want %s among them", table, need[table], p)
			}
		}
	}
	// The list handed out is a copy.
	source.RelayTables()[0].Privileges[0] = "NOTHING"
	if source.RelayTables()[0].Privileges[0] == "NOTHING" {
		t.Error("RelayTables shares its lists with callers")
	}
}

func TestMissingOnRelayTable(t *testing.T) {
	t.Parallel()
	rt := source.RelayTable{Name: "failed_events", Privileges: []string{"SELECT", "INSERT", "UPDATE", "DELETE"}}
	name := `"outbox_relay"."failed_events"`
	for _, tc := range []struct {
		name string
		g    source.RelayGrants
		want []string
	}{
		{name: "absent", g: source.RelayGrants{Name: name},
			want: []string{`table "outbox_relay"."failed_events" (run migrate up)`}},
		{name: "all held", g: source.RelayGrants{Name: name, Exists: true, Held: set("SELECT", "INSERT", "UPDATE", "DELETE", "TRUNCATE")}},
		{name: "no DELETE", g: source.RelayGrants{Name: name, Exists: true, Held: set("SELECT", "INSERT", "UPDATE")},
			want: []string{`DELETE on "outbox_relay"."failed_events"`}},
		{name: "none", g: source.RelayGrants{Name: name, Exists: true},
			want: []string{
				`SELECT on "outbox_relay"."failed_events"`, `INSERT on "outbox_relay"."failed_events"`,
				`UPDATE on "outbox_relay"."failed_events"`, `DELETE on "outbox_relay"."failed_events"`,
			}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			if got := source.MissingOnRelayTable(rt, tc.g, "run migrate up"); !slices.Equal(got, tc.want) {
				t.Errorf("got %q, want %q", got, tc.want)
			}
		})
	}
}

func TestErrNoPrivilegeWrapped(t *testing.T) {
	t.Parallel()
	err := fmt.Errorf("batch 1: %w: %w", source.ErrNoPrivilege, errors.New("permission denied"))
	if !errors.Is(err, source.ErrNoPrivilege) {
		t.Errorf("%v does not match ErrNoPrivilege", err)
	}
}
