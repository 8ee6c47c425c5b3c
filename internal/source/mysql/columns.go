package mysql

import (
	"context"
	"database/sql"
	"fmt"
	"math"
	"strings"
	"unicode/utf8"

	"github.com/outbox-relay/outbox-relay/internal/layout"
	"github.com/outbox-relay/outbox-relay/internal/source"
)

// tableColumn is one column as the catalogue describes it.
type tableColumn struct {
	Name      string
	Type      string // COLUMN_TYPE, or "json" (see Columns)
	Generated bool
	Serial    bool // AUTO_INCREMENT
	Primary   bool // part of the primary key
	Nullable  bool
	MaxChars  int64 // the longest text the column holds, in characters; 0: no limit known
	MaxBytes  int64 // the same in bytes
}

// Columns describes the table's columns, for layout.Resolve. Type is the
// column type as the server spells it (bigint(20) unsigned, varchar(255),
// datetime(6), longblob); a JSON column is "json" on both servers, MariaDB's
// included (a LONGTEXT with a JSON_VALID check), so that the layout trusts
// its payloads as JSON.
func Columns(ctx context.Context, db *sql.DB, t Table) ([]layout.Column, error) {
	cols, err := tableColumns(ctx, db, t)
	if err != nil {
		return nil, err
	}
	out := make([]layout.Column, len(cols))
	for i, c := range cols {
		out[i] = layout.Column{Name: c.Name, Type: c.Type, Serial: c.Serial}
	}
	return out, nil
}

func tableColumns(ctx context.Context, db *sql.DB, t Table) ([]tableColumn, error) {
	if err := t.Validate(); err != nil {
		return nil, err
	}
	schemaExpr, args := "DATABASE()", []any{t.Name}
	if t.Schema != "" {
		schemaExpr, args = "?", []any{t.Schema, t.Name}
	}
	rows, err := db.QueryContext(ctx, `SELECT COLUMN_NAME, LOWER(COLUMN_TYPE), EXTRA, COLUMN_KEY, IS_NULLABLE = 'YES',
  COALESCE(CHARACTER_MAXIMUM_LENGTH, 0), COALESCE(CHARACTER_OCTET_LENGTH, 0) FROM information_schema.COLUMNS
WHERE TABLE_SCHEMA = `+schemaExpr+` AND TABLE_NAME = ? ORDER BY ORDINAL_POSITION`, args...)
	if err != nil {
		return nil, fmt.Errorf("describe %s: %w", t, err)
	}
	defer rows.Close()
	var cols []tableColumn
	for rows.Next() {
		var c tableColumn
		var extra, key string
		if err := rows.Scan(&c.Name, &c.Type, &extra, &key, &c.Nullable, &c.MaxChars, &c.MaxBytes); err != nil {
			return nil, fmt.Errorf("describe %s: %w", t, err)
		}
		c.Generated = strings.Contains(strings.ToUpper(extra), "GENERATED")
		c.Serial = strings.Contains(strings.ToUpper(extra), "AUTO_INCREMENT")
		c.Primary = key == "PRI"
		cols = append(cols, c)
	}
	if err := rows.Err(); err != nil {
		return nil, fmt.Errorf("describe %s: %w", t, err)
	}
	if len(cols) == 0 {
		return nil, fmt.Errorf("%w: %s (or not visible to this user)", source.ErrNoTable, t)
	}
	// MariaDB's JSON is LONGTEXT with a JSON_VALID(`col`) check.
	checks, err := jsonChecks(ctx, db, schemaExpr, args)
	if err != nil {
		return nil, fmt.Errorf("describe %s: %w", t, err)
	}
	for i := range cols {
		if strings.HasSuffix(cols[i].Type, "text") && checks["json_valid("+QuoteIdent(cols[i].Name)+")"] {
			cols[i].Type = "json"
		}
	}
	return cols, nil
}

// jsonChecks returns the table's check clauses, lower-cased, on MariaDB
// (MySQL has a real JSON type and no TABLE_NAME in CHECK_CONSTRAINTS).
func jsonChecks(ctx context.Context, db *sql.DB, schemaExpr string, args []any) (map[string]bool, error) {
	var version string
	if err := db.QueryRowContext(ctx, "SELECT VERSION()").Scan(&version); err != nil {
		return nil, err
	}
	if !strings.Contains(strings.ToLower(version), "mariadb") {
		return nil, nil
	}
	rows, err := db.QueryContext(ctx, `SELECT LOWER(CHECK_CLAUSE) FROM information_schema.CHECK_CONSTRAINTS
WHERE CONSTRAINT_SCHEMA = `+schemaExpr+` AND TABLE_NAME = ?`, args...)
	if err != nil {
		return nil, err
	}
	defer rows.Close()
	out := map[string]bool{}
	for rows.Next() {
		var c string
		if err := rows.Scan(&c); err != nil {
			return nil, err
		}
		out[c] = true
	}
	return out, rows.Err()
}

// tableColumns returns the store's table columns, looked up once.
func (s *Store) tableColumns(ctx context.Context) ([]tableColumn, error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.columns == nil {
		cols, err := tableColumns(ctx, s.db, s.opts.Table)
		if err != nil {
			return nil, err
		}
		s.columns = cols
	}
	return s.columns, nil
}

// rowJSON renders a row of alias as a JSON object of its columns: the copy
// kept with a dead letter. Bytes are kept as base64 (see restoreSQL).
func rowJSON(cols []tableColumn, alias string) string {
	var parts []string
	for _, c := range cols {
		v := sq.Col(alias, c.Name)
		if isBinaryType(c.Type) {
			v = "TO_BASE64(" + v + ")"
		}
		parts = append(parts, quoteLiteral(c.Name), v)
	}
	return "JSON_OBJECT(" + strings.Join(parts, ", ") + ")"
}

// restoreSQL reads column c back from a JSON copy made by rowJSON: JSON
// null is SQL NULL, strings lose their quotes.
func restoreSQL(c tableColumn, doc string) string {
	path := quoteLiteral(`$."` + strings.ReplaceAll(c.Name, `"`, `\"`) + `"`)
	v := "JSON_EXTRACT(" + doc + ", " + path + ")"
	e := "CASE WHEN JSON_TYPE(" + v + ") = 'NULL' THEN NULL ELSE JSON_UNQUOTE(" + v + ") END"
	if isBinaryType(c.Type) {
		e = "FROM_BASE64(" + e + ")"
	}
	return e
}

// column returns the store's table column named name.
func (s *Store) column(ctx context.Context, name string) (tableColumn, error) {
	cols, err := s.tableColumns(ctx)
	if err != nil {
		return tableColumn{}, err
	}
	for _, c := range cols {
		if c.Name == name {
			return c, nil
		}
	}
	return tableColumn{}, fmt.Errorf("column %s of %s not found", QuoteIdent(name), s.opts.Table)
}

// fitError cuts an error text to what the layout's error column holds (an
// adopted table's VARCHAR(255), say), on a character boundary, marking the
// cut with "...". Without an error column it returns msg as truncate does.
func (s *Store) fitError(ctx context.Context, msg string) (string, error) {
	msg = source.ErrorText(msg)
	if s.opts.Layout.Error == "" {
		return msg, nil
	}
	c, err := s.column(ctx, s.opts.Layout.Error)
	if err != nil {
		return "", err
	}
	return fitText(msg, c.MaxChars, c.MaxBytes), nil
}

// fitText cuts s to at most maxChars characters and maxBytes bytes (zero:
// no limit), ending a cut text with "..." when there is room for it.
func fitText(s string, maxChars, maxBytes int64) string {
	if maxChars <= 0 {
		maxChars = math.MaxInt64
	}
	if maxBytes <= 0 {
		maxBytes = math.MaxInt64
	}
	if int64(len(s)) <= maxBytes && int64(utf8.RuneCountInString(s)) <= maxChars {
		return s
	}
	mark := "..."
	if maxChars < int64(len(mark)) || maxBytes < int64(len(mark)) {
		mark = ""
	}
	limChars, limBytes := maxChars-int64(len(mark)), maxBytes-int64(len(mark))
	var chars int64
	end := 0
	for end < len(s) {
		_, size := utf8.DecodeRuneInString(s[end:])
		if chars+1 > limChars || int64(end+size) > limBytes {
			break
		}
		chars++
		end += size
	}
	return s[:end] + mark
}

// errorReset is the SET item that empties the error column on replay: its
// default where it has a literal one, else NULL or ” (MySQL refuses
// DEFAULT(col) for the expression defaults that TEXT columns need).
func (s *Store) errorReset(ctx context.Context) (string, error) {
	name := s.opts.Layout.Error
	if name == "" {
		return "", nil
	}
	c, err := s.column(ctx, name)
	if err != nil {
		return "", err
	}
	q := QuoteIdent(name)
	switch {
	case !strings.Contains(c.Type, "text") && !strings.Contains(c.Type, "blob") && c.Type != "json":
		return q + " = DEFAULT(" + q + ")", nil
	case c.Nullable:
		return q + " = NULL", nil
	}
	return q + " = ''", nil
}
