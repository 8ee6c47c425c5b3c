package mysql

import (
	"context"
	"database/sql"
	"fmt"
	"slices"
)

// Privileges is what the relay's user may do on a table, against what the
// layout needs.
type Privileges struct {
	Table   Table
	Missing []string // needed, not granted
	Extra   []string // granted, not needed
}

// grantee is the current user as information_schema's GRANTEE spells it.
const grantee = `CONCAT('''', SUBSTRING_INDEX(CURRENT_USER(), '@', 1), '''@''', SUBSTRING_INDEX(CURRENT_USER(), '@', -1), '''')`

// tablePrivileges returns the privileges the current user holds on a table
// through global, database (wildcards included) and table grants. Grants
// that reach the user through a role are not seen.
func tablePrivileges(ctx context.Context, db *sql.DB, schema, table string) (map[string]bool, error) {
	rows, err := db.QueryContext(ctx, `SELECT PRIVILEGE_TYPE FROM information_schema.USER_PRIVILEGES WHERE GRANTEE = `+grantee+`
UNION SELECT PRIVILEGE_TYPE FROM information_schema.SCHEMA_PRIVILEGES WHERE GRANTEE = `+grantee+` AND ? LIKE TABLE_SCHEMA
UNION SELECT PRIVILEGE_TYPE FROM information_schema.TABLE_PRIVILEGES WHERE GRANTEE = `+grantee+` AND TABLE_SCHEMA = ? AND TABLE_NAME = ?`,
		schema, schema, table)
	if err != nil {
		return nil, err
	}
	defer rows.Close()
	out := map[string]bool{}
	for rows.Next() {
		var p string
		if err := rows.Scan(&p); err != nil {
			return nil, err
		}
		out[p] = true
	}
	return out, rows.Err()
}

// columnPrivileges returns column -> privileges granted on single columns.
func columnPrivileges(ctx context.Context, db *sql.DB, schema, table string) (map[string]map[string]bool, error) {
	rows, err := db.QueryContext(ctx, `SELECT COLUMN_NAME, PRIVILEGE_TYPE FROM information_schema.COLUMN_PRIVILEGES
WHERE GRANTEE = `+grantee+` AND TABLE_SCHEMA = ? AND TABLE_NAME = ?`, schema, table)
	if err != nil {
		return nil, err
	}
	defer rows.Close()
	out := map[string]map[string]bool{}
	for rows.Next() {
		var c, p string
		if err := rows.Scan(&c, &p); err != nil {
			return nil, err
		}
		if out[c] == nil {
			out[c] = map[string]bool{}
		}
		out[c][p] = true
	}
	return out, rows.Err()
}

func (t Table) schemaOrCurrent(ctx context.Context, db *sql.DB) (string, error) {
	if t.Schema != "" {
		return t.Schema, nil
	}
	var s sql.NullString
	if err := db.QueryRowContext(ctx, "SELECT DATABASE()").Scan(&s); err != nil {
		return "", err
	}
	if !s.Valid {
		return "", fmt.Errorf("table %s names no database and the DSN names none", t)
	}
	return s.String, nil
}

// CheckPrivileges compares the current user's grants on t with need.
// UPDATE granted on each of updateCols (see layout.Layout.UpdatedColumns) counts as
// UPDATE: column grants are enough for the relay. INSERT and UPDATE granted
// on any column count as granted when they are not needed.
func CheckPrivileges(ctx context.Context, db *sql.DB, t Table, need []string, updateCols ...string) (Privileges, error) {
	p := Privileges{Table: t}
	if err := t.Validate(); err != nil {
		return p, err
	}
	schema, err := t.schemaOrCurrent(ctx, db)
	if err != nil {
		return p, fmt.Errorf("check privileges on %s: %w", t, err)
	}
	held, err := tablePrivileges(ctx, db, schema, t.Name)
	if err != nil {
		return p, fmt.Errorf("check privileges on %s: %w", t, err)
	}
	cols, err := columnPrivileges(ctx, db, schema, t.Name)
	if err != nil {
		return p, fmt.Errorf("check privileges on %s: %w", t, err)
	}
	anyColumn := func(priv string) bool {
		for _, c := range cols {
			if c[priv] {
				return true
			}
		}
		return false
	}
	for _, priv := range []string{"SELECT", "INSERT", "UPDATE", "DELETE", "DROP", "ALTER"} {
		needed := slices.Contains(need, priv)
		has := held[priv]
		if !has && !needed && (priv == "INSERT" || priv == "UPDATE") {
			has = anyColumn(priv)
		}
		if needed && !has && priv == "UPDATE" && len(updateCols) > 0 {
			has = true
			for _, c := range updateCols {
				if !cols[c]["UPDATE"] {
					has = false
					break
				}
			}
		}
		switch {
		case needed && !has:
			p.Missing = append(p.Missing, priv)
		case !needed && has:
			p.Extra = append(p.Extra, priv)
		}
	}
	return p, nil
}

// relayTableNeeds is what the relay does on each of its own tables: the
// engine, the stats it records and dead-letter replay.
var relayTableNeeds = []struct {
	table string
	privs []string
}{
	{"relay_state", []string{"SELECT", "INSERT", "UPDATE"}},
	{"failed_events", []string{"SELECT", "INSERT", "UPDATE"}},
	{"failed_event_audit", []string{"INSERT"}},
	{"retry_state", []string{"SELECT", "INSERT", "UPDATE", "DELETE"}},
	{"leases", []string{"SELECT", "INSERT", "UPDATE", "DELETE"}},
	// run reads it at start to find the migrations still to apply.
	{"goose_db_version", []string{"SELECT"}},
}

// CanMigrate reports whether the user can apply the relay's migrations in
// relayDB: create the database when it does not exist, and create and
// alter its tables.
func CanMigrate(ctx context.Context, db *sql.DB, relayDB string) (bool, error) {
	if relayDB == "" {
		relayDB = DefaultRelayDatabase
	}
	held, err := tablePrivileges(ctx, db, relayDB, "")
	if err != nil {
		return false, fmt.Errorf("check migration rights on %s: %w", relayDB, err)
	}
	return held["CREATE"] && held["ALTER"] && held["INDEX"], nil
}

// CheckRelayDatabase reports what the current user lacks on the relay's
// own database: each table the migrations make, and the privileges the
// relay uses on it.
func CheckRelayDatabase(ctx context.Context, db *sql.DB, relayDB string) ([]string, error) {
	if relayDB == "" {
		relayDB = DefaultRelayDatabase
	}
	if err := ValidateIdent("relay_database", relayDB); err != nil {
		return nil, err
	}
	var missing []string
	for _, tn := range relayTableNeeds {
		name := QuoteIdent(relayDB) + "." + QuoteIdent(tn.table)
		var n int
		if err := db.QueryRowContext(ctx, "SELECT COUNT(*) FROM information_schema.TABLES WHERE TABLE_SCHEMA = ? AND TABLE_NAME = ?",
			relayDB, tn.table).Scan(&n); err != nil {
			return nil, fmt.Errorf("check %s: %w", name, err)
		}
		if n == 0 {
			missing = append(missing, "table "+name+" (run migrate up, or grant access to it)")
			continue
		}
		held, err := tablePrivileges(ctx, db, relayDB, tn.table)
		if err != nil {
			return nil, fmt.Errorf("check %s: %w", name, err)
		}
		for _, priv := range tn.privs {
			if !held[priv] {
				missing = append(missing, priv+" on "+name)
			}
		}
	}
	return missing, nil
}
