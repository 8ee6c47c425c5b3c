package postgres

import (
	"context"
	"errors"
	"fmt"
	"regexp"
	"slices"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgxpool"

	"github.com/outbox-relay/outbox-relay/internal/source"
)

// tableKinds are the table privileges PostgreSQL knows that check reports.
var tableKinds = []string{"SELECT", "INSERT", "UPDATE", "DELETE", "TRUNCATE"}

// CheckPrivileges compares the current role's grants on t with need (see
// source.ComparePrivileges for the rule).
//
// The table is looked up by OID, so that a role without USAGE on the
// table's schema is reported as missing "USAGE on schema ..." rather than
// making the check itself fail.
func CheckPrivileges(ctx context.Context, pool *pgxpool.Pool, t Table, need []string, updateCols ...string) (source.Privileges, error) {
	var (
		oid   uint32
		usage bool
	)
	err := pool.QueryRow(ctx, `SELECT c.oid, has_schema_privilege(current_user, n.oid, 'USAGE')
FROM pg_class c JOIN pg_namespace n ON n.oid = c.relnamespace
WHERE n.nspname = $1 AND c.relname = $2`, t.Schema, t.Name).Scan(&oid, &usage)
	if errors.Is(err, pgx.ErrNoRows) {
		return source.Privileges{}, fmt.Errorf("check privileges on %s: table not found", t)
	}
	if err != nil {
		return source.Privileges{}, fmt.Errorf("check privileges on %s: %w", t, err)
	}
	g, err := granted(ctx, pool, oid, updateCols)
	if err != nil {
		return source.Privileges{}, fmt.Errorf("check privileges on %s: %w", t, err)
	}
	p := source.ComparePrivileges(tableKinds, need, updateCols, g)
	if !usage {
		p.Missing = append([]string{"USAGE on schema " + QuoteIdent(t.Schema)}, p.Missing...)
	}
	return p, nil
}

// granted reads what the current role holds on the table oid: each table
// privilege, INSERT and UPDATE on any column, and UPDATE on each of cols.
func granted(ctx context.Context, pool *pgxpool.Pool, oid uint32, cols []string) (source.Granted, error) {
	g := source.Granted{Table: map[string]bool{}, AnyColumn: map[string]bool{}, Columns: map[string]map[string]bool{}}
	for _, priv := range tableKinds {
		var has bool
		if err := pool.QueryRow(ctx, "SELECT has_table_privilege(current_user, $1::oid, $2)", oid, priv).Scan(&has); err != nil {
			return g, fmt.Errorf("%s: %w", priv, err)
		}
		g.Table[priv] = has
	}
	for _, priv := range []string{"INSERT", "UPDATE"} {
		var has bool
		if err := pool.QueryRow(ctx, "SELECT has_any_column_privilege(current_user, $1::oid, $2)", oid, priv).Scan(&has); err != nil {
			return g, fmt.Errorf("%s on any column: %w", priv, err)
		}
		g.AnyColumn[priv] = has
	}
	for _, c := range cols {
		var has bool
		if err := pool.QueryRow(ctx, "SELECT has_column_privilege(current_user, $1::oid, $2, 'UPDATE')", oid, c).Scan(&has); err != nil {
			return g, fmt.Errorf("UPDATE on %s: %w", QuoteIdent(c), err)
		}
		g.Columns[c] = map[string]bool{"UPDATE": has}
	}
	return g, nil
}

// CanMigrate reports whether the role can apply the relay's migrations:
// create the schema when it does not exist (CREATE on the database), or
// alter what is in it (membership of the schema owner's role).
func CanMigrate(ctx context.Context, pool *pgxpool.Pool, relaySchema string) (bool, error) {
	var ok bool
	err := pool.QueryRow(ctx, `SELECT CASE WHEN n.oid IS NULL THEN has_database_privilege(current_database(), 'CREATE')
  ELSE pg_has_role(current_user, n.nspowner, 'USAGE') END
FROM (SELECT 1) one LEFT JOIN pg_namespace n ON n.nspname = $1`, relaySchema).Scan(&ok)
	if err != nil {
		return false, fmt.Errorf("check migration rights on %s: %w", relaySchema, err)
	}
	return ok, nil
}

// CanInstallTrigger reports whether the role can create the wake-up trigger
// on t (the TRIGGER privilege, which the table's owner has).
func CanInstallTrigger(ctx context.Context, pool *pgxpool.Pool, t Table) (bool, error) {
	var ok bool
	if err := pool.QueryRow(ctx, "SELECT has_table_privilege(current_user, $1::regclass, 'TRIGGER')", t.String()).Scan(&ok); err != nil {
		return false, fmt.Errorf("check TRIGGER on %s: %w", t, err)
	}
	return ok, nil
}

// CheckRelaySchema reports what the role lacks on the relay's own schema:
// USAGE on it, the privileges the relay uses on each of its tables, and
// USAGE on the sequences of serial columns of tables it inserts into.
func CheckRelaySchema(ctx context.Context, pool *pgxpool.Pool, relaySchema string) ([]string, error) {
	var missing []string
	var usage bool
	if err := pool.QueryRow(ctx, "SELECT EXISTS (SELECT 1 FROM pg_namespace WHERE nspname = $1) AND has_schema_privilege(current_user, $1, 'USAGE')", relaySchema).Scan(&usage); err != nil {
		return nil, fmt.Errorf("check schema %s: %w", relaySchema, err)
	}
	if !usage {
		return []string{"USAGE on schema " + relaySchema + " (or the schema is missing: run migrate up)"}, nil
	}
	for _, rt := range source.RelayTables() {
		name := pgx.Identifier{relaySchema, rt.Name}.Sanitize()
		g, oid, err := relayGrants(ctx, pool, name)
		if err != nil {
			return nil, err
		}
		missing = append(missing, source.MissingOnRelayTable(rt, g, "run migrate up")...)
		if !g.Exists || !slices.Contains(rt.Privileges, "INSERT") {
			continue
		}
		seqs, err := missingSequences(ctx, pool, oid)
		if err != nil {
			return nil, fmt.Errorf("check sequences of %s: %w", name, err)
		}
		missing = append(missing, seqs...)
	}
	return missing, nil
}

// relayGrants reads what the current role holds on the relay table name
// (quoted, qualified), and its oid.
func relayGrants(ctx context.Context, pool *pgxpool.Pool, name string) (source.RelayGrants, uint32, error) {
	g := source.RelayGrants{Name: name, Held: map[string]bool{}}
	var oid *uint32
	if err := pool.QueryRow(ctx, "SELECT to_regclass($1)::oid", name).Scan(&oid); err != nil {
		return g, 0, fmt.Errorf("check %s: %w", name, err)
	}
	if oid == nil {
		return g, 0, nil
	}
	g.Exists = true
	for _, priv := range tableKinds {
		var has bool
		if err := pool.QueryRow(ctx, "SELECT has_table_privilege(current_user, $1::oid, $2)", *oid, priv).Scan(&has); err != nil {
			return g, 0, fmt.Errorf("check %s on %s: %w", priv, name, err)
		}
		g.Held[priv] = has
	}
	return g, *oid, nil
}

// missingSequences lists the sequences of the serial columns of table oid
// that the current role may not use, as "USAGE on sequence name".
func missingSequences(ctx context.Context, pool *pgxpool.Pool, oid uint32) ([]string, error) {
	rows, err := pool.Query(ctx, `SELECT s.oid::regclass::text, has_sequence_privilege(current_user, s.oid, 'USAGE')
FROM pg_depend d JOIN pg_class s ON s.oid = d.objid AND s.relkind = 'S'
WHERE d.classid = 'pg_class'::regclass AND d.refclassid = 'pg_class'::regclass AND d.refobjid = $1::oid AND d.deptype = 'a'
ORDER BY 1`, oid)
	if err != nil {
		return nil, err
	}
	type seq struct {
		name string
		has  bool
	}
	seqs, err := pgx.CollectRows(rows, func(r pgx.CollectableRow) (seq, error) {
		var s seq
		err := r.Scan(&s.name, &s.has)
		return s, err
	})
	if err != nil {
		return nil, err
	}
	var missing []string
	for _, sq := range seqs {
		if !sq.has {
			missing = append(missing, "USAGE on sequence "+sq.name)
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
