package source

import (
	"errors"
	"slices"
)

// ErrNoPrivilege marks a failure caused by a grant the relay's role (or
// user) lacks. Each store wraps it beside the driver's error, so that a
// caller tells "grant it" from other failures with errors.Is, whatever the
// database.
var ErrNoPrivilege = errors.New("missing privilege")

// Privileges is what the relay's role may do on an outbox table, against
// what its layout needs.
type Privileges struct {
	Missing []string // needed, not granted
	Extra   []string // granted, not needed
}

// Granted is what a role holds on one table, as its database reports it.
type Granted struct {
	// Table holds the privileges granted on the whole table (directly or
	// through the schema, the database or the server).
	Table map[string]bool
	// AnyColumn holds the privileges granted on at least one column, for a
	// database that answers that question itself; else they are found in
	// Columns.
	AnyColumn map[string]bool
	// Columns holds, per column, the privileges granted on that column.
	// A store may report only the columns the relay updates.
	Columns map[string]map[string]bool
}

// onAnyColumn reports whether priv is granted on at least one column.
func (g Granted) onAnyColumn(priv string) bool {
	if g.AnyColumn[priv] {
		return true
	}
	for _, c := range g.Columns {
		if c[priv] {
			return true
		}
	}
	return false
}

// onEachColumn reports whether priv is granted on every column of cols,
// whole-table grants included.
func (g Granted) onEachColumn(priv string, cols []string) bool {
	for _, c := range cols {
		if !g.Table[priv] && !g.Columns[c][priv] {
			return false
		}
	}
	return true
}

// ComparePrivileges compares what a role holds on an outbox table with
// need (see layout.Layout.NeededPrivileges), over the table privileges the
// database knows (kinds, in the order they are reported).
//
// UPDATE granted on each of updateCols (see layout.Layout.UpdatedColumns)
// counts as UPDATE: column grants are enough for the relay. INSERT and
// UPDATE granted on any column count as granted when they are not needed,
// so that check reports them as more than needed.
func ComparePrivileges(kinds, need, updateCols []string, g Granted) Privileges {
	var p Privileges
	for _, priv := range kinds {
		needed := slices.Contains(need, priv)
		has := g.Table[priv]
		if !has && !needed && (priv == "INSERT" || priv == "UPDATE") {
			has = g.onAnyColumn(priv)
		}
		if !has && needed && priv == "UPDATE" && len(updateCols) > 0 {
			has = g.onEachColumn(priv, updateCols)
		}
		switch {
		case needed && !has:
			p.Missing = append(p.Missing, priv)
		case !needed && has:
			p.Extra = append(p.Extra, priv)
		}
	}
	return p
}

// RelayTable is one of the relay's own tables and what the relay does on
// it.
type RelayTable struct {
	Name       string
	Privileges []string
}

// relayTables is what the relay does on each of its own tables: the engine,
// the stats it records, dead-letter replay and purge, and retention, which
// prunes replayed dead letters with their audit rows (a DELETE whose WHERE
// reads the table needs SELECT too).
var relayTables = []RelayTable{
	{"relay_state", []string{"SELECT", "INSERT", "UPDATE"}},
	{"failed_events", []string{"SELECT", "INSERT", "UPDATE", "DELETE"}},
	{"failed_event_audit", []string{"SELECT", "INSERT", "DELETE"}},
	{"retry_state", []string{"SELECT", "INSERT", "UPDATE", "DELETE"}},
	{"leases", []string{"SELECT", "INSERT", "UPDATE", "DELETE"}},
	// Each replica registers with a heartbeat and removes itself, and
	// those gone for an hour.
	{"replicas", []string{"SELECT", "INSERT", "UPDATE", "DELETE"}},
	// The holder of a source writes its chart's samples and prunes the
	// old ones; any replica reads them.
	{"source_samples", []string{"SELECT", "INSERT", "DELETE"}},
	// run reads it at start to find the migrations still to apply.
	{"goose_db_version", []string{"SELECT"}},
}

// RelayTables lists the relay's own tables and what the relay needs on
// each, in the order check reports them.
func RelayTables() []RelayTable {
	out := make([]RelayTable, len(relayTables))
	for i, t := range relayTables {
		out[i] = RelayTable{Name: t.Name, Privileges: slices.Clone(t.Privileges)}
	}
	return out
}

// RelayGrants is what a store found of one relay table.
type RelayGrants struct {
	// Name is the table as check names it (quoted, qualified).
	Name string
	// Exists is false when the table is missing, or the role cannot see it.
	Exists bool
	// Held holds the privileges granted on the whole table.
	Held map[string]bool
}

// MissingOnRelayTable lists what a role lacks on one of the relay's tables:
// the table itself (with absentHint, what to do about it), or each needed
// privilege not held, as "PRIVILEGE on name".
func MissingOnRelayTable(t RelayTable, g RelayGrants, absentHint string) []string {
	if !g.Exists {
		return []string{"table " + g.Name + " (" + absentHint + ")"}
	}
	var missing []string
	for _, priv := range t.Privileges {
		if !g.Held[priv] {
			missing = append(missing, priv+" on "+g.Name)
		}
	}
	return missing
}
