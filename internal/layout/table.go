package layout

import (
	"errors"
	"fmt"
	"strings"
	"unicode/utf8"
)

// maxIdentLen is PostgreSQL's identifier limit (NAMEDATALEN-1); longer names
// would be truncated silently by the server.
const maxIdentLen = 63

// ParseTableName splits a schema-qualified table name into its schema and
// table. Each part is either a plain identifier (lower-case letters, digits,
// "_" and "$", not starting with a digit or "$") or a double-quoted identifier
// in which "" stands for one double quote, as in SQL. The returned names are
// unquoted: `tenant."Outbox""Event"` gives tenant and Outbox"Event.
//
// Plain identifiers with upper-case letters are rejected rather than folded
// to lower case: write them quoted to keep the case, or in lower case.
func ParseTableName(s string) (schema, table string, err error) {
	fail := func(err error) (string, string, error) {
		return "", "", fmt.Errorf("invalid table name %q: %w", s, err)
	}
	schema, rest, err := ParseIdent(s)
	if err != nil {
		return fail(err)
	}
	if rest == "" {
		return fail(errors.New("must be schema-qualified, as schema.table"))
	}
	if rest[0] != '.' {
		return fail(fmt.Errorf("unexpected %q after %q", rest, schema))
	}
	table, rest, err = ParseIdent(rest[1:])
	if err != nil {
		return fail(err)
	}
	if rest != "" {
		if rest[0] == '.' {
			return fail(errors.New("too many parts: use schema.table"))
		}
		return fail(fmt.Errorf("unexpected %q after %q", rest, table))
	}
	return schema, table, nil
}

// ParseIdent reads one identifier from the start of s and returns it
// unquoted, with the rest of s.
func ParseIdent(s string) (ident, rest string, err error) {
	if s == "" {
		return "", "", errors.New("missing identifier")
	}
	if s[0] == '"' {
		return parseQuotedIdent(s)
	}
	i := 0
	for i < len(s) && isPlainIdentByte(s[i], i == 0) {
		i++
	}
	if i < len(s) && s[i] >= 'A' && s[i] <= 'Z' {
		word, _, _ := strings.Cut(s, ".")
		return "", "", fmt.Errorf("%q has upper-case letters: quote it as %s to keep them, or write it in lower case", word, quoteIdent(word))
	}
	if i == 0 {
		r, _ := utf8.DecodeRuneInString(s)
		return "", "", fmt.Errorf("unexpected %q at the start of an identifier", r)
	}
	if i > maxIdentLen {
		return "", "", fmt.Errorf("identifier %q is longer than %d bytes", s[:i], maxIdentLen)
	}
	return s[:i], s[i:], nil
}

func parseQuotedIdent(s string) (ident, rest string, err error) {
	var b strings.Builder
	for i := 1; i < len(s); i++ {
		switch c := s[i]; {
		case c == '"' && i+1 < len(s) && s[i+1] == '"':
			b.WriteByte('"')
			i++
		case c == '"':
			id := b.String()
			switch {
			case id == "":
				return "", "", errors.New("empty quoted identifier")
			case len(id) > maxIdentLen:
				return "", "", fmt.Errorf("identifier %q is longer than %d bytes", id, maxIdentLen)
			case !utf8.ValidString(id):
				return "", "", fmt.Errorf("identifier %q is not valid UTF-8", id)
			}
			return id, s[i+1:], nil
		case c == 0:
			return "", "", errors.New("quoted identifier contains a NUL byte")
		default:
			b.WriteByte(c)
		}
	}
	return "", "", errors.New("unterminated quoted identifier")
}

func isPlainIdentByte(c byte, first bool) bool {
	switch {
	case c >= 'a' && c <= 'z', c == '_':
		return true
	case c >= '0' && c <= '9', c == '$':
		return !first
	}
	return false
}

// CheckPlainIdent accepts a plain (unquoted, lower-case) identifier.
func CheckPlainIdent(s string) error {
	if s == "" {
		return errors.New("required")
	}
	if id, rest, err := ParseIdent(s); err != nil || rest != "" || s[0] == '"' || id == "" {
		return fmt.Errorf("must be a plain lower-case identifier ([a-z_][a-z0-9_$]*, at most %d bytes), got %q", maxIdentLen, s)
	}
	return nil
}

// quoteIdent quotes s as a SQL identifier.
func quoteIdent(s string) string {
	return `"` + strings.ReplaceAll(s, `"`, `""`) + `"`
}
