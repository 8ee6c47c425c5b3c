// Package migrations embeds the SQL that creates and upgrades the relay's own
// schema, one directory per dialect. Every file has an up and a down section
// (goose format). The SQL is unqualified: it runs with search_path set to the
// configured relay schema (on MySQL/MariaDB, with the relay database as the
// connection's database), so the same files serve any schema name.
package migrations

import "embed"

// Postgres holds the PostgreSQL migrations under "postgres/".
//
//go:embed postgres/*.sql
var Postgres embed.FS

// MySQL holds the MySQL 8 / MariaDB 10.6+ migrations under "mysql/".
//
//go:embed mysql/*.sql
var MySQL embed.FS
