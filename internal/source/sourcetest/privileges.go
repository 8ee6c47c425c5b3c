package sourcetest

import (
	"slices"
	"strings"
	"testing"

	"github.com/outbox-relay/outbox-relay/internal/source"
)

// Grants is what a restricted role is granted: privileges on the outbox
// table, and on each of the relay's own tables by name (see
// source.RelayTables).
type Grants struct {
	Outbox []string
	Relay  map[string][]string
}

// PrivilegeReport is what `outbox-relay check` reports for a role: the
// privileges the table's layout needs, how the role's grants on the outbox
// table compare, and what it lacks on the relay's own tables.
type PrivilegeReport struct {
	Need, Missing, Extra []string
	RelayMissing         []string
}

// RoleTable is a Table whose database can make restricted roles (users).
// A Table that cannot does not implement it, and the suite skips the
// privilege checks for it.
type RoleTable interface {
	// CheckAs creates a role that may log in, with no privileges but g and
	// whatever reaching the tables takes (USAGE on their schemas, on the
	// sequences of the relay tables it may insert into), connects as it
	// and returns what check reports for it, as check computes it.
	CheckAs(t *testing.T, g Grants) PrivilegeReport
}

// relayGrants is what the relay needs on its own tables, less drop
// ("table PRIVILEGE").
func relayGrants(drop ...string) map[string][]string {
	out := map[string][]string{}
	for _, rt := range source.RelayTables() {
		for _, p := range rt.Privileges {
			if !slices.Contains(drop, rt.Name+" "+p) {
				out[rt.Name] = append(out[rt.Name], p)
			}
		}
	}
	return out
}

// testPrivileges checks what check reports for a role granted nothing on
// the outbox table, exactly what the layout and the relay's tables need,
// and less and more than that.
func (s *suite) testPrivileges(t *testing.T) {
	tb, ok := s.h.NewTable(t, s.preset).(RoleTable)
	if !ok {
		t.Skip("the harness cannot make restricted roles")
	}
	none := tb.CheckAs(t, Grants{Relay: relayGrants()})
	need := none.Need
	if !slices.Contains(need, "SELECT") {
		t.Fatalf("the layout needs %v, want SELECT among them", need)
	}
	if s.caps.TableUntouched && !slices.Equal(need, []string{"SELECT"}) {
		t.Fatalf("the layout needs %v, want SELECT alone: the store never writes to the table", need)
	}
	if !slices.Equal(none.Missing, need) || len(none.Extra) > 0 || len(none.RelayMissing) > 0 {
		t.Errorf("granted nothing on the outbox table: missing %v, more %v, relay tables missing %v; want missing %v and nothing else",
			none.Missing, none.Extra, none.RelayMissing, need)
	}

	exact := tb.CheckAs(t, Grants{Outbox: need, Relay: relayGrants()})
	if len(exact.Missing) > 0 || len(exact.Extra) > 0 || len(exact.RelayMissing) > 0 {
		t.Errorf("granted exactly what is needed: missing %v, more %v, relay tables missing %v; want none",
			exact.Missing, exact.Extra, exact.RelayMissing)
	}

	// Less: UPDATE on the outbox table where the layout needs it (else its
	// last need), and DELETE on failed_events, which dlq purge and
	// retention use. More: INSERT on the outbox table where not needed.
	lack := "UPDATE"
	if !slices.Contains(need, lack) {
		lack = need[len(need)-1]
	}
	outbox := slices.DeleteFunc(slices.Clone(need), func(p string) bool { return p == lack })
	var more []string
	if !slices.Contains(need, "INSERT") {
		outbox = append(outbox, "INSERT")
		more = []string{"INSERT"}
	}
	less := tb.CheckAs(t, Grants{Outbox: outbox, Relay: relayGrants("failed_events DELETE")})
	if !slices.Equal(less.Missing, []string{lack}) || !slices.Equal(less.Extra, more) {
		t.Errorf("granted %v: missing %v, more %v; want missing [%s], more %v", outbox, less.Missing, less.Extra, lack, more)
	}
	if len(less.RelayMissing) != 1 || !strings.HasPrefix(less.RelayMissing[0], "DELETE on ") ||
		!strings.Contains(less.RelayMissing[0], "failed_events") {
		t.Errorf("without DELETE on failed_events: relay tables missing %q, want DELETE on failed_events alone", less.RelayMissing)
	}
}
