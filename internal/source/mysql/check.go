package mysql

import (
	"context"
	"database/sql"
	"fmt"

	"github.com/outbox-relay/outbox-relay/internal/source"
)

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

// tableKinds are the table privileges MySQL knows that check reports.
var tableKinds = []string{"SELECT", "INSERT", "UPDATE", "DELETE", "DROP", "ALTER"}

// CheckPrivileges compares the current user's grants on t with need (see
// source.ComparePrivileges for the rule).
func CheckPrivileges(ctx context.Context, db *sql.DB, t Table, need []string, updateCols ...string) (source.Privileges, error) {
	if err := t.Validate(); err != nil {
		return source.Privileges{}, err
	}
	schema, err := t.schemaOrCurrent(ctx, db)
	if err != nil {
		return source.Privileges{}, fmt.Errorf("check privileges on %s: %w", t, err)
	}
	held, err := tablePrivileges(ctx, db, schema, t.Name)
	if err != nil {
		return source.Privileges{}, fmt.Errorf("check privileges on %s: %w", t, err)
	}
	cols, err := columnPrivileges(ctx, db, schema, t.Name)
	if err != nil {
		return source.Privileges{}, fmt.Errorf("check privileges on %s: %w", t, err)
	}
	return source.ComparePrivileges(tableKinds, need, updateCols, source.Granted{Table: held, Columns: cols}), nil
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
	for _, rt := range source.RelayTables() {
		g := source.RelayGrants{Name: QuoteIdent(relayDB) + "." + QuoteIdent(rt.Name)}
		var n int
		if err := db.QueryRowContext(ctx, "SELECT COUNT(*) FROM information_schema.TABLES WHERE TABLE_SCHEMA = ? AND TABLE_NAME = ?",
			relayDB, rt.Name).Scan(&n); err != nil {
			return nil, fmt.Errorf("check %s: %w", g.Name, err)
		}
		if g.Exists = n > 0; g.Exists {
			held, err := tablePrivileges(ctx, db, relayDB, rt.Name)
			if err != nil {
				return nil, fmt.Errorf("check %s: %w", g.Name, err)
			}
			g.Held = held
		}
		missing = append(missing, source.MissingOnRelayTable(rt, g, "run migrate up, or grant access to it")...)
	}
	return missing, nil
}
