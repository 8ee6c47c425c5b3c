// Package queue embeds the SQL that creates the payment dispatch queue of
// the queue layout (seed 003's tables): a sequence allocator per
// participant, the hot pending table, the append-only attempts archive and
// the wake-up trigger. It runs with search_path set to the application's
// schema.
package queue

import "embed"

// Postgres holds the PostgreSQL migrations under "postgres/".
//
//go:embed postgres/*.sql
var Postgres embed.FS
