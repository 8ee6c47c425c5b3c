package postgres

import (
	"strings"

	"github.com/jackc/pgx/v5"

	"github.com/outbox-relay/outbox-relay/internal/source/sqlcore"
)

// QuoteIdent quotes one SQL identifier.
func QuoteIdent(s string) string { return pgx.Identifier{s}.Sanitize() }

// quoteLiteral quotes a string constant. Layout values (status names) are
// inlined rather than bound so that partial indexes such as
// "WHERE status = 'pending'" match the claim query's plan.
func quoteLiteral(s string) string { return "'" + strings.ReplaceAll(s, "'", "''") + "'" }

// dialect is PostgreSQL's spelling of what sqlcore writes.
type dialect struct{}

func (dialect) Quote(ident string) string { return QuoteIdent(ident) }
func (dialect) Literal(s string) string   { return quoteLiteral(s) }
func (dialect) Text(expr string) string   { return expr + "::text" }
func (dialect) NullText() string          { return "NULL::text" }
func (dialect) Concat(parts []string) string {
	return "(" + strings.Join(parts, " || ") + ")"
}

func (dialect) Bool(b bool) string {
	if b {
		return "true"
	}
	return "false"
}

// Now is the statement's start: every row of one statement gets one time.
func (dialect) Now() string                 { return "statement_timestamp()" }
func (dialect) Timestamp(utc string) string { return "'" + utc + "+00'" }

// ResetError sets the column's default: NULL, or ” for a NOT NULL column.
func (dialect) ResetError(quotedCol string) string { return quotedCol + " = DEFAULT" }

// Hash32 reads md5's first eight hex digits as 32 bits, then as a
// bigint (unsigned: a bit string is not signed).
func (dialect) Hash32(text string) string {
	return "('x' || substr(md5(" + text + "), 1, 8))::bit(32)::bigint"
}

// sq writes the layout's SQL in PostgreSQL's dialect.
var sq = sqlcore.SQL{D: dialect{}}

// Like is LIKE, which compares by code point whatever the collation.
func (dialect) Like(text, pattern string) string {
	return text + " LIKE " + pattern + " ESCAPE '" + sqlcore.LikeEscape + "'"
}
