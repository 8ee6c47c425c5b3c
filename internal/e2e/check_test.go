package e2e

import (
	"context"
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/twmb/franz-go/pkg/kfake"

	"github.com/outbox-relay/outbox-relay/internal/fixtures"
	"github.com/outbox-relay/outbox-relay/internal/mytest"
	"github.com/outbox-relay/outbox-relay/internal/pgtest"
)

// writeYAML writes a configuration file for the test.
func writeYAML(t *testing.T, body string) string {
	t.Helper()
	p := filepath.Join(t.TempDir(), "relay.yaml")
	if err := os.WriteFile(p, []byte(body), 0o600); err != nil {
		t.Fatal(err)
	}
	return p
}

// TestCheckOnAFreshDatabase is check as a new user first runs it: a
// superuser, a database the relay has not migrated yet, one source whose
// layout is wrong, one topic not created, one sink down. Each is reported
// (none hides the others), the unmigrated schema is explained rather than
// called a missing privilege, and the wake-up trigger run will install is
// mentioned.
func TestCheckOnAFreshDatabase(t *testing.T) {
	t.Parallel()
	dsn, pool := pgtest.NewDB(t)
	pgtest.Exec(t, pool, fixtures.Seed000, fixtures.Seed001)
	c := kafkaCluster(t, kfake.SeedTopics(1, "journey.created"))
	cfg := writeYAML(t, fmt.Sprintf(`databases:
  main: {dsn: %q}
sinks:
  kafka: {type: kafka, brokers: [%q]}
  down: {type: kafka, brokers: ["127.0.0.1:1"]}
sources:
  - name: journeys
    table: journey_matcher.outbox
    preset: published-flag
    sink: kafka
  - name: orders
    table: public.outbox
    preset: status
    sink: kafka
    layout: {key: "{no_such_column}"}
  - name: payments
    table: public.outbox
    preset: status
    sink: kafka
    topic: payments
`, dsn, c.ListenAddrs()[0]))
	out, err := runCLI(t, "--config", cfg, "check")
	if err == nil {
		t.Fatalf("check passed:\n%s", out)
	}
	for _, want := range []string{
		"databases.main: relay schema outbox_relay: not migrated yet (",
		"source journeys: \"journey_matcher\".\"outbox\" (mode flag) needs SELECT, UPDATE: ok",
		"source journeys: wake-up trigger: not installed yet; run installs it",
		`source "orders": sources[1].layout.key:`,
		"no_such_column",
		"sinks.down: UNREACHABLE",
		"sinks.kafka: MISSING topics payments",
		"check found 3 problem(s)",
	} {
		if !strings.Contains(out+err.Error(), want) {
			t.Errorf("check output lacks %q:\n%s\n%v", want, out, err)
		}
	}
	if strings.Contains(out, "MISSING USAGE") {
		t.Errorf("check calls an unmigrated schema a missing privilege:\n%s", out)
	}
}

// TestCheckManagedTableOnMariaDB: a table the relay creates itself
// (manage_table, seed 004's kafka_outbox) is not an error before it exists.
func TestCheckManagedTableOnMariaDB(t *testing.T) {
	t.Parallel()
	appDB, dsn := mytest.NewDatabase(t, "check")
	relayDB := "relay_" + mytest.Suffix()
	t.Cleanup(func() { mytest.Drop(t, relayDB) })
	c := kafkaCluster(t)
	cfg := writeYAML(t, fmt.Sprintf(`relay_schema: %s
databases:
  main: {driver: mysql, dsn: %q}
sinks:
  kafka: {type: kafka, brokers: [%q]}
sources:
  - name: outbox
    table: %s.kafka_outbox
    preset: kafka-outbox
    manage_table: true
`, relayDB, dsn, c.ListenAddrs()[0], appDB))
	out, err := runCLI(t, "--config", cfg, "check", "--skip-sinks")
	if err != nil {
		t.Fatalf("check: %v\n%s", err, out)
	}
	for _, want := range []string{
		"relay database " + relayDB + ": not migrated yet",
		"source outbox: table " + appDB + ".kafka_outbox does not exist yet; run (or `outbox-relay migrate up`) creates it (manage_table)",
		"check passed",
	} {
		if !strings.Contains(out, want) {
			t.Errorf("check output lacks %q:\n%s", want, out)
		}
	}
}

// TestCheckAdvisesTheClaimIndexOnMariaDB: check warns, naming the index,
// when a MySQL table that keeps its delivered rows has no index of its
// pending rows in the claim's order (each claim would read past every
// delivered row); a warning, not a problem.
func TestCheckAdvisesTheClaimIndexOnMariaDB(t *testing.T) {
	t.Parallel()
	appDB, dsn := mytest.NewDatabase(t, "check")
	relayDB := "relay_" + mytest.Suffix()
	t.Cleanup(func() { mytest.Drop(t, relayDB) })
	db := mytest.Admin(t)
	mytest.Exec(t, db, `CREATE TABLE `+appDB+`.outbox (id CHAR(36) PRIMARY KEY, aggregate_id VARCHAR(100), topic VARCHAR(100) NOT NULL,
  payload JSON NOT NULL, status ENUM('pending', 'published', 'failed') NOT NULL DEFAULT 'pending',
  published_at DATETIME(6), created_at DATETIME(6) NOT NULL)`)
	c := kafkaCluster(t)
	cfg := writeYAML(t, fmt.Sprintf(`relay_schema: %s
databases:
  main: {driver: mysql, dsn: %q}
sinks:
  kafka: {type: kafka, brokers: [%q]}
sources:
  - name: events
    table: %s.outbox
    preset: status
`, relayDB, dsn, c.ListenAddrs()[0], appDB))
	if _, err := runCLI(t, "--config", cfg, "migrate", "up"); err != nil {
		t.Fatal(err)
	}
	want := "source events: claims: WARNING no index holds the pending rows in the claim's order"
	out, err := runCLI(t, "--config", cfg, "check", "--skip-sinks")
	if err != nil || !strings.Contains(out, want) || !strings.Contains(out, "INDEX (`status`, `created_at`)") {
		t.Fatalf("check without the index: %v; want it to pass with the warning %q naming the index:\n%s", err, want, out)
	}
	mytest.Exec(t, db, "ALTER TABLE "+appDB+".outbox ADD KEY pending (status, created_at)")
	out, err = runCLI(t, "--config", cfg, "check", "--skip-sinks")
	if err != nil || strings.Contains(out, "claims: WARNING") {
		t.Fatalf("check with the index: %v; want no claims warning:\n%s", err, out)
	}
}

// TestCheckNATSDuplicateWindow: check compares a NATS stream's duplicate
// window with the relay's retry horizon: a window of 10 minutes covers the
// default 5 minute horizon; a horizon of 20 minutes is not covered and is a
// problem, named with the numbers.
func TestCheckNATSDuplicateWindow(t *testing.T) {
	t.Parallel()
	dsn, pool := pgtest.NewDB(t)
	pgtest.Exec(t, pool, fixtures.Seed001)
	s := newNATSStream(t)
	cfgFor := func(horizon string) string {
		return writeYAML(t, fmt.Sprintf(`databases:
  main: {dsn: %q}
sinks:
  bus: {type: nats, nats: {url: %q, retry_horizon: %s}}
sources:
  - name: orders
    table: public.outbox
    preset: status
    topic: %s.orders
`, dsn, s.url, horizon, s.prefix))
	}
	out, _ := runCLI(t, "--config", cfgFor("5m"), "check")
	if want := "stream " + s.name + " deduplicates for 10m0s, covering retries up to 5m0s: ok"; !strings.Contains(out, want) {
		t.Errorf("check output lacks %q:\n%s", want, out)
	}
	out, err := runCLI(t, "--config", cfgFor("20m"), "check")
	if err == nil || !strings.Contains(out, "forgets message ids after 10m0s, but a retry may come 20m0s after the first attempt") {
		t.Errorf("check with a 20m horizon: %v\n%s", err, out)
	}
}

// TestInboxPurgeCommand: `outbox-relay inbox purge` deletes seed 001's
// expired processed_events in batches and leaves the live ones.
func TestInboxPurgeCommand(t *testing.T) {
	t.Parallel()
	dsn, pool := pgtest.NewDB(t)
	pgtest.Exec(t, pool, fixtures.Seed001, `INSERT INTO processed_events (event_id, consumer_group, expires_at)
SELECT gen_random_uuid(), 'wallet', now() - interval '1 hour' FROM generate_series(1, 25)`,
		`INSERT INTO processed_events (event_id, consumer_group) SELECT gen_random_uuid(), 'wallet' FROM generate_series(1, 5)`)
	out, err := runCLI(t, "inbox", "purge", "--dsn", dsn, "--batch", "10")
	if err != nil || !strings.Contains(out, "deleted 25 expired ids from processed_events") {
		t.Fatalf("inbox purge: %v\n%s", err, out)
	}
	var left int
	_ = pool.QueryRow(context.Background(), "SELECT count(*) FROM processed_events").Scan(&left)
	if left != 5 {
		t.Errorf("%d ids left, want the 5 live ones", left)
	}
}
