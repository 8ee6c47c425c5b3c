// Package kafkaoutbox embeds the SQL that creates and upgrades the
// kafka_outbox table, the outbox the relay owns inside an application's
// database (preset kafka-outbox). The table lives in the application's
// schema, so its migrations have their own version table beside it rather
// than the relay schema's.
//
// The files are goose migrations with two placeholders, filled in by the
// migration runner: {{table}} is the quoted table (schema-qualified on
// PostgreSQL; on MySQL/MariaDB the migrations run with the table's database
// as the connection's) and {{name}} its bare name (a plain lower-case
// identifier), for naming its indexes and looking it up in the catalogue.
package kafkaoutbox

import (
	"embed"
	"fmt"
	"io/fs"
	"strings"
	"testing/fstest"
)

// Postgres holds the PostgreSQL migrations under "postgres/".
//
//go:embed postgres/*.sql
var Postgres embed.FS

// MySQL holds the MySQL 8 / MariaDB 10.6+ migrations under "mysql/".
//
//go:embed mysql/*.sql
var MySQL embed.FS

// Files returns the migrations of one dialect ("postgres" or "mysql") with
// the placeholders filled: {{table}} with table as the dialect quotes it,
// {{name}} with the bare name.
func Files(dialect, table, name string) (fs.FS, error) {
	var src fs.FS
	switch dialect {
	case "postgres":
		src = Postgres
	case "mysql":
		src = MySQL
	default:
		return nil, fmt.Errorf("kafka_outbox migrations: unknown dialect %q", dialect)
	}
	files, err := fs.ReadDir(src, dialect)
	if err != nil {
		return nil, err
	}
	r := strings.NewReplacer("{{table}}", table, "{{name}}", name)
	out := fstest.MapFS{}
	for _, f := range files {
		b, err := fs.ReadFile(src, dialect+"/"+f.Name())
		if err != nil {
			return nil, err
		}
		out[f.Name()] = &fstest.MapFile{Data: []byte(r.Replace(string(b))), Mode: 0o444}
	}
	return out, nil
}
