package config

import (
	"fmt"
	"regexp"
	"strings"
	"unicode/utf8"

	"github.com/outbox-relay/outbox-relay/internal/layout"
)

// A database entry with dsns or discover stands for many databases. The
// rule of what it expands to is here, and only here:
//
//   - each of its databases is a Member named "<entry>/<database>"
//     (MemberName), the database being the one its connection string names
//     (dsns) or the one discovery found; its settings are the entry's, its
//     connection string its own, and max_conns is its own budget;
//   - each source naming the entry is a template: it runs once on every
//     member, named "<source>@<entry>/<database>" (MemberSourceName), with
//     everything else copied (SourcesOn), but for "{database}" in its
//     table, which is the member's database (TableOn). A template that
//     discovers its
//     tables by schema names each table it finds
//     "<source>@<entry>/<database>:<schema>.<table>".
//
// Configured names cannot hold "/" or "@", so no expanded name can clash
// with a configured one.

// MemberName is the name of database dbname of multi-database entry
// entry: "tenants/tenant_042".
func MemberName(entry, dbname string) string { return entry + "/" + dbname }

// MemberSourceName is the name of source on member database member:
// "orders@tenants/tenant_042".
func MemberSourceName(source, member string) string { return source + "@" + member }

// SplitMemberName returns the entry and database of a member's name, and
// false for any other name (a database of the configuration).
func SplitMemberName(name string) (entry, dbname string, ok bool) {
	return strings.Cut(name, "/")
}

// Multi reports whether the entry stands for several databases (dsns or
// discover) rather than being one.
func (d Database) Multi() bool { return len(d.DSNs) > 0 || d.Discover != nil }

// Member is one database of a multi-database entry, as the relay runs it.
type Member struct {
	Name   string // MemberName(Entry, DBName)
	Entry  string // the key of the entry in databases
	DBName string // the database's own name on its server
	// Database is the member's settings: the entry's, with the member's
	// own connection string and neither dsns nor discover.
	Database Database
}

// Member returns database dbname of entry, reached at dsn.
func (c *Config) Member(entry, dbname, dsn string) Member {
	db := c.Databases[entry]
	db.DSN, db.DSNs, db.Discover = dsn, nil, nil
	return Member{Name: MemberName(entry, dbname), Entry: entry, DBName: dbname, Database: db}
}

// Placed is a source as it runs on one database: Index is its position in
// sources, for the field paths of errors about it.
type Placed struct {
	Index  int
	Source Source
}

// SourcesOn lists the sources that run on database name: for a database of
// the configuration, the sources naming it; for a member, the sources of
// its entry as templates (renamed, and naming the member as their
// database). A multi-database entry itself runs no source.
func (c *Config) SourcesOn(name string) []Placed {
	entry, _, member := SplitMemberName(name)
	if db, ok := c.Databases[entry]; !ok || db.Multi() != member {
		return nil
	}
	var out []Placed
	for i, s := range c.Sources {
		if s.Database != entry {
			continue
		}
		if member {
			_, dbname, _ := SplitMemberName(name)
			s.Name, s.Database, s.Table = MemberSourceName(s.Name, name), name, TableOn(s.Table, dbname)
		}
		out = append(out, Placed{Index: i, Source: s})
	}
	return out
}

// DatabasePlaceholder, in the table of a source on a multi-database
// entry, stands for each database's own name: on MySQL, where a table's
// schema is its database, "{database}.kafka_outbox".
const DatabasePlaceholder = "{database}"

// TableOn is table on database dbname: DatabasePlaceholder replaced by the
// database's name, quoted when it is not a plain lower-case identifier.
func TableOn(table, dbname string) string {
	if !strings.Contains(table, DatabasePlaceholder) {
		return table
	}
	id := dbname
	if layout.CheckPlainIdent(dbname) != nil {
		id = `"` + strings.ReplaceAll(dbname, `"`, `""`) + `"`
	}
	return strings.ReplaceAll(table, DatabasePlaceholder, id)
}

// regexPrefix marks a discovery pattern that is a regular expression.
const regexPrefix = "regex:"

// Matcher returns the test a database name must pass to be discovered:
// Pattern's, or one every name passes when the rule has a Query instead.
func (d *DatabaseDiscover) Matcher() (func(string) bool, error) {
	if d.Pattern == "" {
		return func(string) bool { return true }, nil
	}
	var (
		re  *regexp.Regexp
		err error
	)
	if expr, ok := strings.CutPrefix(d.Pattern, regexPrefix); ok {
		if re, err = regexp.Compile(expr); err != nil {
			return nil, fmt.Errorf("invalid regular expression: %w", err)
		}
	} else if re, err = globRegexp(d.Pattern); err != nil {
		return nil, fmt.Errorf("invalid glob %q: %w", d.Pattern, err)
	}
	return re.MatchString, nil
}

// globRegexp turns a glob into an anchored regular expression: * is any
// run of characters, ? any one, [abc], [a-z] and [!a-z] a set.
func globRegexp(glob string) (*regexp.Regexp, error) {
	var b strings.Builder
	b.WriteString("^")
	for i := 0; i < len(glob); i++ {
		switch c := glob[i]; c {
		case '*':
			b.WriteString(".*")
		case '?':
			b.WriteString(".")
		case '[':
			end := strings.IndexByte(glob[i+1:], ']')
			if end < 0 {
				return nil, fmt.Errorf("unclosed %q", "[")
			}
			set := glob[i+1 : i+1+end]
			if set == "" || set == "!" {
				return nil, fmt.Errorf("empty set %q", glob[i:i+2+end])
			}
			b.WriteString("[")
			if set[0] == '!' {
				b.WriteString("^")
				set = set[1:]
			}
			b.WriteString(strings.NewReplacer(`\`, `\\`, `[`, `\[`, `^`, `\^`).Replace(set))
			b.WriteString("]")
			i += 1 + end
		default:
			_, size := utf8.DecodeRuneInString(glob[i:])
			b.WriteString(regexp.QuoteMeta(glob[i : i+size]))
			i += size - 1
		}
	}
	b.WriteString("$")
	return regexp.Compile(b.String())
}
