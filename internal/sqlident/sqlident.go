// Package sqlident quotes SQL identifiers for PostgreSQL and for MySQL and
// MariaDB.
package sqlident

import (
	"strings"

	"github.com/jackc/pgx/v5"
)

// Quote quotes one identifier: backticks for MySQL, double quotes else.
func Quote(mysql bool, ident string) string {
	if mysql {
		return "`" + strings.ReplaceAll(ident, "`", "``") + "`"
	}
	return pgx.Identifier{ident}.Sanitize()
}

// QuoteName quotes a dotted name ("schema.table") part by part.
func QuoteName(mysql bool, name string) string {
	parts := strings.Split(name, ".")
	for i, p := range parts {
		parts[i] = Quote(mysql, p)
	}
	return strings.Join(parts, ".")
}
