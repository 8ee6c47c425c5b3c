package cli_test

import (
	"testing"

	"github.com/outbox-relay/outbox-relay/internal/pgtest"
)

// TestMigrateUpManagedTable: `migrate up` also creates the outbox table of a
// source with manage_table (on by default for preset kafka-outbox), and
// `migrate down --all` leaves that table, which holds the application's
// rows, alone.
func TestMigrateUpManagedTable(t *testing.T) {
	t.Parallel()
	dsn, pool := pgtest.NewDB(t)
	pgtest.Exec(t, pool, "CREATE SCHEMA app")
	cfg := writeConfig(t, dsn, "127.0.0.1:1", "", `  - name: managed
    table: app.kafka_outbox
    preset: kafka-outbox
  - name: unmanaged
    table: public.kafka_outbox
    preset: kafka-outbox
    manage_table: false
`)
	exists := func(schema string) bool {
		return count(t, pool, "SELECT count(*) FROM pg_tables WHERE schemaname = $1 AND tablename = 'kafka_outbox'", schema) == 1
	}
	cliOK(t, "--config", cfg, "migrate", "up")
	cliOK(t, "--config", cfg, "migrate", "up") // idempotent
	if !exists("app") {
		t.Fatal("migrate up did not create app.kafka_outbox")
	}
	if exists("public") {
		t.Fatal("migrate up created the table of a source with manage_table: false")
	}
	pgtest.Exec(t, pool, `INSERT INTO app.kafka_outbox (topic, payload_json) VALUES ('orders', '{}')`)
	cliOK(t, "--config", cfg, "migrate", "down", "--all")
	if !exists("app") || count(t, pool, "SELECT count(*) FROM app.kafka_outbox") != 1 {
		t.Fatal("migrate down --all touched the managed table")
	}
}
