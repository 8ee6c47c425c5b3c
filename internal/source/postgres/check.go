package postgres

import (
	"context"
	"errors"
	"fmt"
	"regexp"
	"slices"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgxpool"
)

// Privileges is what the relay's role may do on a table, against what the
// layout needs.
type Privileges struct {
	Table   Table
	Missing []string // needed, not granted
	Extra   []string // granted, not needed
}

// CheckPrivileges compares the current role's grants on t with need.
//
// The table is looked up by OID, so that a role without USAGE on the
// table's schema is reported as missing "USAGE on schema ..." rather than
// making the check itself fail. UPDATE granted on each of updateCols (see
// layout.Layout.UpdatedColumns) counts as UPDATE: column-level grants are enough for the
// relay. INSERT and UPDATE granted on any column count as granted when they
// are not needed.
func CheckPrivileges(ctx context.Context, pool *pgxpool.Pool, t Table, need []string, updateCols ...string) (Privileges, error) {
	p := Privileges{Table: t}
	var (
		oid   uint32
		usage bool
	)
	err := pool.QueryRow(ctx, `SELECT c.oid, has_schema_privilege(current_user, n.oid, 'USAGE')
FROM pg_class c JOIN pg_namespace n ON n.oid = c.relnamespace
WHERE n.nspname = $1 AND c.relname = $2`, t.Schema, t.Name).Scan(&oid, &usage)
	if errors.Is(err, pgx.ErrNoRows) {
		return p, fmt.Errorf("check privileges on %s: table not found", t)
	}
	if err != nil {
		return p, fmt.Errorf("check privileges on %s: %w", t, err)
	}
	if !usage {
		p.Missing = append(p.Missing, "USAGE on schema "+QuoteIdent(t.Schema))
	}
	for _, priv := range []string{"SELECT", "INSERT", "UPDATE", "DELETE", "TRUNCATE"} {
		needed := slices.Contains(need, priv)
		fn := "has_table_privilege"
		if !needed && (priv == "INSERT" || priv == "UPDATE") {
			fn = "has_any_column_privilege"
		}
		var has bool
		if err := pool.QueryRow(ctx, "SELECT "+fn+"(current_user, $1::oid, $2)", oid, priv).Scan(&has); err != nil {
			return p, fmt.Errorf("check %s on %s: %w", priv, t, err)
		}
		if needed && !has && priv == "UPDATE" && len(updateCols) > 0 {
			has = true
			for _, c := range updateCols {
				var ok bool
				if err := pool.QueryRow(ctx, "SELECT has_column_privilege(current_user, $1::oid, $2, 'UPDATE')", oid, c).Scan(&ok); err != nil {
					return p, fmt.Errorf("check UPDATE on %s.%s: %w", t, QuoteIdent(c), err)
				}
				if !ok {
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
	for _, tn := range relayTableNeeds {
		name := pgx.Identifier{relaySchema, tn.table}.Sanitize()
		var oid *uint32
		if err := pool.QueryRow(ctx, "SELECT to_regclass($1)::oid", name).Scan(&oid); err != nil {
			return nil, fmt.Errorf("check %s: %w", name, err)
		}
		if oid == nil {
			missing = append(missing, "table "+name+" (run migrate up)")
			continue
		}
		for _, priv := range tn.privs {
			var has bool
			if err := pool.QueryRow(ctx, "SELECT has_table_privilege(current_user, $1::oid, $2)", *oid, priv).Scan(&has); err != nil {
				return nil, fmt.Errorf("check %s on %s: %w", priv, name, err)
			}
			if !has {
				missing = append(missing, priv+" on "+name)
			}
		}
		if !slices.Contains(tn.privs, "INSERT") {
			continue
		}
		rows, err := pool.Query(ctx, `SELECT s.oid::regclass::text, has_sequence_privilege(current_user, s.oid, 'USAGE')
FROM pg_depend d JOIN pg_class s ON s.oid = d.objid AND s.relkind = 'S'
WHERE d.classid = 'pg_class'::regclass AND d.refclassid = 'pg_class'::regclass AND d.refobjid = $1::oid AND d.deptype = 'a'
ORDER BY 1`, *oid)
		if err != nil {
			return nil, fmt.Errorf("check sequences of %s: %w", name, err)
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
			return nil, fmt.Errorf("check sequences of %s: %w", name, err)
		}
		for _, sq := range seqs {
			if !sq.has {
				missing = append(missing, "USAGE on sequence "+sq.name)
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
