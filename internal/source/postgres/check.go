package postgres

import (
	"context"
	"fmt"
	"regexp"
	"slices"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgxpool"

	"github.com/outbox-relay/outbox-relay/internal/layout"
)

// Privileges is what the relay's role may do on a table, against what the
// layout needs.
type Privileges struct {
	Table   Table
	Missing []string // needed, not granted
	Extra   []string // granted, not needed
}

// NeededPrivileges lists what a layout needs on its outbox table: SELECT
// always; UPDATE to mark rows (or keep retry columns); DELETE only when the
// layout deletes delivered rows.
func NeededPrivileges(l *layout.Layout) []string {
	need := []string{"SELECT"}
	if l.Mode != "delete" || l.RetryCount != "" || l.Error != "" {
		need = append(need, "UPDATE")
	}
	if l.Mode == "delete" {
		need = append(need, "DELETE")
	}
	return need
}

// CheckPrivileges compares the current role's grants on t with need.
func CheckPrivileges(ctx context.Context, pool *pgxpool.Pool, t Table, need []string) (Privileges, error) {
	p := Privileges{Table: t}
	for _, priv := range []string{"SELECT", "INSERT", "UPDATE", "DELETE", "TRUNCATE"} {
		var has bool
		if err := pool.QueryRow(ctx, "SELECT has_table_privilege(current_user, $1, $2)", t.String(), priv).Scan(&has); err != nil {
			return p, fmt.Errorf("check %s on %s: %w", priv, t, err)
		}
		needed := slices.Contains(need, priv)
		switch {
		case needed && !has:
			p.Missing = append(p.Missing, priv)
		case !needed && has:
			p.Extra = append(p.Extra, priv)
		}
	}
	return p, nil
}

// CheckRelaySchema reports what the role lacks on the relay's own tables.
func CheckRelaySchema(ctx context.Context, pool *pgxpool.Pool, relaySchema string) ([]string, error) {
	var missing []string
	var usage bool
	if err := pool.QueryRow(ctx, "SELECT EXISTS (SELECT 1 FROM pg_namespace WHERE nspname = $1) AND has_schema_privilege(current_user, $1, 'USAGE')", relaySchema).Scan(&usage); err != nil {
		return nil, fmt.Errorf("check schema %s: %w", relaySchema, err)
	}
	if !usage {
		return []string{"USAGE on schema " + relaySchema + " (or the schema is missing: run migrate up)"}, nil
	}
	for _, tbl := range []string{"relay_state", "failed_events", "failed_event_audit", "retry_state", "leases"} {
		name := pgx.Identifier{relaySchema, tbl}.Sanitize()
		for _, priv := range []string{"SELECT", "INSERT", "UPDATE", "DELETE"} {
			var has bool
			err := pool.QueryRow(ctx, "SELECT to_regclass($1) IS NOT NULL AND has_table_privilege(current_user, $1, $2)", name, priv).Scan(&has)
			if err != nil {
				return nil, fmt.Errorf("check %s on %s: %w", priv, name, err)
			}
			if !has {
				missing = append(missing, priv+" on "+name)
			}
		}
	}
	return missing, nil
}

// Discover lists the tables named one of names in schemas matching re.
func Discover(ctx context.Context, pool *pgxpool.Pool, re *regexp.Regexp, names []string) ([]Table, error) {
	rows, err := pool.Query(ctx, `SELECT table_schema, table_name FROM information_schema.tables
WHERE table_name = ANY($1) AND table_type = 'BASE TABLE'
  AND table_schema NOT IN ('pg_catalog', 'information_schema')
ORDER BY table_schema, table_name`, names)
	if err != nil {
		return nil, fmt.Errorf("discover outbox tables: %w", err)
	}
	all, err := pgx.CollectRows(rows, func(r pgx.CollectableRow) (Table, error) {
		var t Table
		err := r.Scan(&t.Schema, &t.Name)
		return t, err
	})
	if err != nil {
		return nil, fmt.Errorf("discover outbox tables: %w", err)
	}
	var out []Table
	for _, t := range all {
		if re.MatchString(t.Schema) {
			out = append(out, t)
		}
	}
	return out, nil
}
