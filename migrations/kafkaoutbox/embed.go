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

import "embed"

// Postgres holds the PostgreSQL migrations under "postgres/".
//
//go:embed postgres/*.sql
var Postgres embed.FS

// MySQL holds the MySQL 8 / MariaDB 10.6+ migrations under "mysql/".
//
//go:embed mysql/*.sql
var MySQL embed.FS
