package mysql

import (
	"encoding/hex"
	"fmt"
	"strings"
	"unicode/utf8"
)

// maxIdentLen is the longest identifier MySQL and MariaDB accept, in
// characters.
const maxIdentLen = 64

// IdentError says which configuration field holds an identifier the relay
// refuses.
type IdentError struct {
	Field string
	Name  string
	Msg   string
}

func (e *IdentError) Error() string {
	return fmt.Sprintf("%s: identifier %q %s", e.Field, e.Name, e.Msg)
}

// ValidateIdent checks one identifier taken from configuration or from the
// catalogue: not empty, valid UTF-8, at most 64 characters, no backtick and
// no NUL. field names where it came from, for the error.
func ValidateIdent(field, name string) error {
	switch {
	case name == "":
		return &IdentError{field, name, "is empty"}
	case !utf8.ValidString(name):
		return &IdentError{field, name, "is not valid UTF-8"}
	case utf8.RuneCountInString(name) > maxIdentLen:
		return &IdentError{field, name, fmt.Sprintf("is longer than %d characters", maxIdentLen)}
	case strings.ContainsRune(name, '`'):
		return &IdentError{field, name, "contains a backtick"}
	case strings.ContainsRune(name, 0):
		return &IdentError{field, name, "contains a NUL byte"}
	}
	return nil
}

// QuoteIdent quotes one identifier with backticks. Names are validated
// before they reach SQL; doubling a backtick keeps even an unvalidated name
// from closing the quote.
func QuoteIdent(s string) string { return "`" + strings.ReplaceAll(s, "`", "``") + "`" }

// quoteLiteral renders a string constant. A value with a backslash is
// written as a hex literal, which reads the same whether or not the session
// has NO_BACKSLASH_ESCAPES.
func quoteLiteral(s string) string {
	if strings.ContainsAny(s, "\\\x00") {
		if s == "" {
			return "''"
		}
		return "_utf8mb4 X'" + hex.EncodeToString([]byte(s)) + "'"
	}
	return "'" + strings.ReplaceAll(s, "'", "''") + "'"
}

// Table names an outbox table: Schema is its database (MySQL's schemas are
// databases); empty means the database the DSN names.
type Table struct {
	Schema, Name string
}

// String is the quoted, database-qualified name.
func (t Table) String() string {
	if t.Schema == "" {
		return QuoteIdent(t.Name)
	}
	return QuoteIdent(t.Schema) + "." + QuoteIdent(t.Name)
}

// Validate checks both parts of the name.
func (t Table) Validate() error {
	if t.Schema != "" {
		if err := ValidateIdent("table (database)", t.Schema); err != nil {
			return err
		}
	}
	return ValidateIdent("table", t.Name)
}
