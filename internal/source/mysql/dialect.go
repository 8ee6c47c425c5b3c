package mysql

import (
	"strings"

	"github.com/outbox-relay/outbox-relay/internal/source/sqlcore"
)

// dialect is MySQL's and MariaDB's spelling of what sqlcore writes.
type dialect struct{}

func (dialect) Quote(ident string) string { return QuoteIdent(ident) }
func (dialect) Literal(s string) string   { return quoteLiteral(s) }

// Text renders expr as utf8mb4 text.
func (dialect) Text(expr string) string { return "CAST(" + expr + " AS CHAR CHARACTER SET utf8mb4)" }
func (dialect) NullText() string        { return "NULL" }

// Concat is CONCAT, which is NULL when any part is.
func (dialect) Concat(parts []string) string { return "CONCAT(" + strings.Join(parts, ", ") + ")" }

func (dialect) Bool(b bool) string {
	if b {
		return "TRUE"
	}
	return "FALSE"
}

func (dialect) Now() string                 { return now }
func (dialect) Timestamp(utc string) string { return "'" + utc + "'" }

// ResetError is left to Replay: the reset depends on the column's type
// (see errorReset).
func (dialect) ResetError(string) string { return "" }

// Hash32 hashes text's utf8mb4 bytes (MD5 hashes the bytes of its
// argument's character set) and reads the first eight hex digits.
func (dialect) Hash32(text string) string {
	return "CAST(CONV(SUBSTR(MD5(CONVERT(" + text + " USING utf8mb4)), 1, 8), 16, 10) AS UNSIGNED)"
}

// sq writes the layout's SQL in MySQL's dialect.
var sq = sqlcore.SQL{D: dialect{}}

// asText renders an expression as utf8mb4 text.
func asText(expr string) string { return dialect{}.Text(expr) }

// Like compares the bytes: LIKE under the column's collation would match
// regardless of case (and, on some collations, of accents).
func (dialect) Like(text, pattern string) string {
	return "CAST(" + text + " AS BINARY) LIKE CAST(" + pattern + " AS BINARY) ESCAPE '" + sqlcore.LikeEscape + "'"
}
