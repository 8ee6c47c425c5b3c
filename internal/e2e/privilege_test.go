package e2e

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgconn"
	"github.com/twmb/franz-go/pkg/kfake"

	"github.com/outbox-relay/outbox-relay/internal/cli"
	"github.com/outbox-relay/outbox-relay/internal/config"
	"github.com/outbox-relay/outbox-relay/internal/fixtures"
	"github.com/outbox-relay/outbox-relay/internal/pgtest"
	"github.com/outbox-relay/outbox-relay/internal/source/postgres"
)

// runCLI runs the command line in this process and returns what it printed
// on stdout and stderr, and its error.
func runCLI(t *testing.T, args ...string) (string, error) {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	var out, errOut bytes.Buffer
	root := cli.NewRoot(&out, &errOut)
	root.SetArgs(args)
	err := root.ExecuteContext(ctx)
	return out.String() + errOut.String(), err
}

// execer is a pool or a connection.
type execer interface {
	Exec(context.Context, string, ...any) (pgconn.CommandTag, error)
}

// newLoginRole creates a login role with a random name and no privileges
// (no password: the local server trusts). What it owns and was granted in
// the test database, then the role itself, are dropped when the test ends,
// before pgtest drops the database (t.Cleanup is LIFO).
func newLoginRole(t *testing.T, admin execer) (role, ident string) {
	t.Helper()
	ctx := context.Background()
	role = "outbox_relay_lp_" + pgtest.Suffix()
	ident = pgx.Identifier{role}.Sanitize()
	if _, err := admin.Exec(ctx, "CREATE ROLE "+ident+" LOGIN"); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
		defer cancel()
		if _, err := admin.Exec(ctx, "DROP OWNED BY "+ident+" CASCADE"); err != nil {
			t.Errorf("drop owned by %s: %v", role, err)
		}
		c, err := pgx.Connect(ctx, pgtest.AdminDSN())
		if err != nil {
			t.Errorf("drop role %s: %v", role, err)
			return
		}
		defer c.Close(ctx)
		if _, err := c.Exec(ctx, "DROP ROLE IF EXISTS "+ident); err != nil {
			t.Errorf("drop role %s: %v", role, err)
		}
	})
	return role, ident
}

// leastPrivilegeRole creates a login role that may only use schema
// journey_matcher, SELECT and UPDATE journey_matcher.outbox, and owns the
// relay's schema outbox_relay (created for it by the administrator).
func leastPrivilegeRole(t *testing.T, admin execer) string {
	t.Helper()
	ctx := context.Background()
	role, ident := newLoginRole(t, admin)
	for _, q := range []string{
		"GRANT USAGE ON SCHEMA journey_matcher TO " + ident,
		"GRANT SELECT, UPDATE ON journey_matcher.outbox TO " + ident,
		"CREATE SCHEMA outbox_relay AUTHORIZATION " + ident,
	} {
		if _, err := admin.Exec(ctx, q); err != nil {
			t.Fatalf("%s: %v", q, err)
		}
	}
	return role
}

// TestLeastPrivilegeRole runs the relay as a role with SELECT and UPDATE on
// the outbox table and nothing else on it, checks that it relays (by
// polling, since it cannot install the wake-up trigger), and that `check`
// reports missing and surplus grants.
func TestLeastPrivilegeRole(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	dsn, pool := pgtest.NewDB(t)
	pgtest.Exec(t, pool, fixtures.Seed000)
	role := leastPrivilegeRole(t, pool)
	roleDSN := pgtest.WithUser(t, dsn, role)
	const topic = "journey.created"
	c := kafkaCluster(t, kfake.SeedTopics(1, topic))
	brokers := c.ListenAddrs()

	insert := func(n int, tag string) []string {
		t.Helper()
		var ids []string
		for i := range n {
			var id string
			if err := pool.QueryRow(ctx, `INSERT INTO journey_matcher.outbox (aggregate_id, aggregate_type, event_type, payload, correlation_id)
VALUES (gen_random_uuid(), 'journey', $1, jsonb_build_object('tag', $2::text, 'i', $3::int), gen_random_uuid()) RETURNING id::text`,
				topic, tag, i).Scan(&id); err != nil {
				t.Fatal(err)
			}
			ids = append(ids, id)
		}
		return ids
	}

	// The role can neither insert nor delete outbox rows.
	rc, err := pgx.Connect(ctx, roleDSN)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = rc.Close(context.Background()) })
	var who string
	if err := rc.QueryRow(ctx, "SELECT current_user").Scan(&who); err != nil || who != role {
		t.Fatalf("connected as %q (%v), want %q", who, err, role)
	}
	for _, q := range []string{
		`INSERT INTO journey_matcher.outbox (aggregate_id, aggregate_type, event_type, payload, correlation_id)
VALUES (gen_random_uuid(), 'journey', 'x', '{}', gen_random_uuid())`,
		`DELETE FROM journey_matcher.outbox`,
		`TRUNCATE journey_matcher.outbox`,
	} {
		_, err := rc.Exec(ctx, q)
		if pgErr, ok := errors.AsType[*pgconn.PgError](err); !ok || pgErr.Code != "42501" {
			t.Errorf("%s as %s: %v, want permission denied (42501)", strings.Fields(q)[0], role, err)
		}
	}

	// The role migrates its own schema, with no CREATE on the database.
	cfgPath := filepath.Join(t.TempDir(), "relay.yaml")
	if err := os.WriteFile(cfgPath, fmt.Appendf(nil, `log: {level: warn, format: text}
admin: {listen: "off"}
databases:
  main: {dsn: %q}
sinks:
  kafka: {type: kafka, brokers: [%q]}
sources:
  - name: jm
    table: journey_matcher.outbox
    preset: published-flag
`, roleDSN, brokers[0]), 0o600); err != nil {
		t.Fatal(err)
	}
	if out, err := runCLI(t, "--config", cfgPath, "migrate", "up"); err != nil {
		t.Fatalf("migrate up as %s, which owns schema outbox_relay but has no CREATE on the database: %v\n%s", role, err, out)
	}

	before := insert(5, "before")
	col := collect(t, brokers, topic)
	stop := runRelay(t, baseConfig(roleDSN, brokers, config.Source{Name: "jm", Table: "journey_matcher.outbox", Preset: "published-flag"}))
	col.waitDistinct(t, len(before), 30*time.Second)
	// Rows written while it runs arrive too: with no trigger, by polling.
	after := insert(5, "after")
	got := distinct(col.waitDistinct(t, len(before)+len(after), 30*time.Second))
	for _, id := range append(before, after...) {
		if got[id] == nil {
			t.Errorf("event %s not received", id)
		}
	}
	waitFor(t, 10*time.Second, "rows marked published by the role", func() (bool, string) {
		var n int
		_ = pool.QueryRow(ctx, "SELECT count(*) FROM journey_matcher.outbox WHERE published AND published_at IS NOT NULL").Scan(&n)
		return n == 10, fmt.Sprintf("%d/10", n)
	})
	stop()
	has, err := postgres.HasTrigger(ctx, pool, postgres.Table{Schema: "journey_matcher", Name: "outbox"}, "outbox_relay")
	if err != nil {
		t.Fatal(err)
	}
	if has {
		t.Error("a role that does not own the table installed the wake-up trigger")
	}
	var owner string
	if err := pool.QueryRow(ctx, "SELECT tableowner FROM pg_tables WHERE schemaname = 'outbox_relay' AND tablename = 'failed_events'").Scan(&owner); err != nil {
		t.Fatal(err)
	}
	if owner != role {
		t.Errorf("outbox_relay.failed_events is owned by %q, want the relay's role %q", owner, role)
	}

	// check, with the same role.
	check := func(strict bool) (string, error) {
		args := []string{"--config", cfgPath, "check", "--skip-sinks"}
		if strict {
			args = append(args, "--strict")
		}
		return runCLI(t, args...)
	}
	sourceLine := func(out string) string {
		for line := range strings.Lines(out) {
			if strings.HasPrefix(line, "source jm:") {
				return strings.TrimSpace(line)
			}
		}
		t.Fatalf("check printed no line for source jm:\n%s", out)
		return ""
	}

	out, err := check(false)
	if err != nil {
		t.Fatalf("check with exactly the needed grants: %v\n%s", err, out)
	}
	if l := sourceLine(out); !strings.HasSuffix(l, "needs SELECT, UPDATE: ok") {
		t.Errorf("check: %q, want it to end with needs SELECT, UPDATE: ok", l)
	}
	if !strings.Contains(out, "relay schema outbox_relay: ok") || !strings.Contains(out, "check passed") {
		t.Errorf("check output:\n%s", out)
	}
	// Seed 000's random ids cannot order the rows of one multi-row INSERT:
	// check says so, and names the fix.
	if !strings.Contains(out, "source jm: order: WARNING rows of one key with the same created_at") ||
		!strings.Contains(out, "GENERATED ALWAYS AS IDENTITY") {
		t.Errorf("check does not warn that seed 000's table cannot prove per-key order:\n%s", out)
	}
	if out, err := check(true); err != nil {
		t.Errorf("check --strict with exactly the needed grants: %v\n%s", err, out)
	}

	ident := pgx.Identifier{role}.Sanitize()
	pgtest.Exec(t, pool, "REVOKE UPDATE ON journey_matcher.outbox FROM "+ident)
	out, err = check(false)
	if err == nil {
		t.Errorf("check without UPDATE succeeded:\n%s", out)
	}
	if l := sourceLine(out); !strings.Contains(l, "MISSING UPDATE") {
		t.Errorf("check without UPDATE: %q, want MISSING UPDATE", l)
	}

	pgtest.Exec(t, pool, "GRANT UPDATE, INSERT, DELETE ON journey_matcher.outbox TO "+ident)
	out, err = check(false)
	if err != nil {
		t.Errorf("check with extra grants, not strict: %v\n%s", err, out)
	}
	if l := sourceLine(out); !strings.Contains(l, ": ok; more than needed: INSERT, DELETE") {
		t.Errorf("check with extra grants: %q, want ok; more than needed: INSERT, DELETE", l)
	}
	if out, err := check(true); err == nil {
		t.Errorf("check --strict with extra grants succeeded:\n%s", out)
	} else if l := sourceLine(out); !strings.Contains(l, "more than needed: INSERT, DELETE") {
		t.Errorf("check --strict with extra grants: %q", l)
	}

	// UPDATE on just the columns the relay writes is enough, for check and
	// for the relay.
	pgtest.Exec(t, pool, "REVOKE INSERT, UPDATE, DELETE ON journey_matcher.outbox FROM "+ident,
		"GRANT UPDATE (published, published_at) ON journey_matcher.outbox TO "+ident)
	out, err = check(true)
	if err != nil {
		t.Errorf("check --strict with column-level UPDATE on the written columns: %v\n%s", err, out)
	}
	if l := sourceLine(out); !strings.HasSuffix(l, "needs SELECT, UPDATE: ok") {
		t.Errorf("check with column-level UPDATE: %q, want ok", l)
	}
	more := insert(3, "columns")
	stop = runRelay(t, baseConfig(roleDSN, brokers, config.Source{Name: "jm", Table: "journey_matcher.outbox", Preset: "published-flag"}))
	got = distinct(col.waitDistinct(t, 13, 30*time.Second))
	for _, id := range more {
		if got[id] == nil {
			t.Errorf("event %s not received with column-level UPDATE", id)
		}
	}
	waitFor(t, 10*time.Second, "rows marked published with column-level UPDATE", func() (bool, string) {
		var n int
		_ = pool.QueryRow(ctx, "SELECT count(*) FROM journey_matcher.outbox WHERE published AND published_at IS NOT NULL").Scan(&n)
		return n == 13, fmt.Sprintf("%d/13", n)
	})
	stop()

	// UPDATE on some of them is not.
	pgtest.Exec(t, pool, "REVOKE UPDATE (published_at) ON journey_matcher.outbox FROM "+ident)
	out, err = check(false)
	if err == nil {
		t.Errorf("check with UPDATE on published only succeeded:\n%s", out)
	}
	if l := sourceLine(out); !strings.Contains(l, "MISSING UPDATE") {
		t.Errorf("check with UPDATE on published only: %q, want MISSING UPDATE", l)
	}

	// Without USAGE on the schema, check says so (rather than failing).
	pgtest.Exec(t, pool, "GRANT UPDATE ON journey_matcher.outbox TO "+ident,
		"REVOKE USAGE ON SCHEMA journey_matcher FROM "+ident)
	out, err = check(false)
	if err == nil {
		t.Errorf("check without USAGE on the schema succeeded:\n%s", out)
	}
	if l := sourceLine(out); !strings.Contains(l, `MISSING USAGE on schema "journey_matcher"`) {
		t.Errorf("check without USAGE on the schema: %q, want MISSING USAGE on schema \"journey_matcher\"", l)
	}
}

// runInProcess runs the command line in this process in the background;
// stop cancels it and returns its output, failing the test if it returned
// an error.
func runInProcess(t *testing.T, args ...string) (stop func() string) {
	t.Helper()
	ctx, cancel := context.WithCancel(context.Background())
	var (
		out  string
		err  error
		done = make(chan struct{})
	)
	go func() {
		defer close(done)
		var o, e bytes.Buffer
		root := cli.NewRoot(&o, &e)
		root.SetArgs(args)
		err = root.ExecuteContext(ctx)
		out = o.String() + e.String()
	}()
	var once sync.Once
	stop = func() string {
		once.Do(func() {
			cancel()
			select {
			case <-done:
			case <-time.After(30 * time.Second):
				t.Fatalf("%s did not stop within 30s of its context being cancelled", strings.Join(args, " "))
			}
			if err != nil {
				t.Errorf("%s: %v\n%s", strings.Join(args, " "), err, out)
			}
		})
		return out
	}
	t.Cleanup(func() { stop() })
	return stop
}

// TestRelayRoleWithoutSchemaOwnership: the schema is migrated by an
// administrator and the relay runs (run --no-migrate, dlq replay and purge) as a role
// granted only what check says it needs on the relay's tables. check
// reports the sequence and table privileges it lacks, and they are really
// needed.
func TestRelayRoleWithoutSchemaOwnership(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	dsn, pool := pgtest.NewDB(t)
	pgtest.Exec(t, pool, fixtures.Seed000)
	const topic = "journey.created"
	c := kafkaCluster(t, kfake.SeedTopics(1, topic))
	broker := c.ListenAddrs()[0]
	writeCfg := func(dsn string) string {
		p := filepath.Join(t.TempDir(), "relay.yaml")
		if err := os.WriteFile(p, fmt.Appendf(nil, `log: {level: warn, format: text}
admin: {listen: "off"}
shutdown: {timeout: 5s}
databases:
  main: {dsn: %q}
sinks:
  kafka: {type: kafka, brokers: [%q], max_message_bytes: 1000}
sources:
  - name: jm
    table: journey_matcher.outbox
    preset: published-flag
    poll: {min: 5ms, max: 50ms}
`, dsn, broker), 0o600); err != nil {
			t.Fatal(err)
		}
		return p
	}
	if out, err := runCLI(t, "--config", writeCfg(dsn), "migrate", "up"); err != nil {
		t.Fatalf("migrate up as the administrator: %v\n%s", err, out)
	}
	role, ident := newLoginRole(t, pool)
	pgtest.Exec(t, pool,
		"GRANT USAGE ON SCHEMA journey_matcher TO "+ident,
		"GRANT SELECT, UPDATE ON journey_matcher.outbox TO "+ident,
		"GRANT USAGE ON SCHEMA outbox_relay TO "+ident,
		"GRANT SELECT, INSERT, UPDATE ON outbox_relay.relay_state TO "+ident,
		"GRANT SELECT, INSERT, UPDATE, DELETE ON outbox_relay.failed_events TO "+ident,
		"GRANT SELECT, INSERT, DELETE ON outbox_relay.failed_event_audit TO "+ident,
		"GRANT SELECT, INSERT, UPDATE, DELETE ON outbox_relay.retry_state, outbox_relay.leases, outbox_relay.replicas TO "+ident,
		"GRANT SELECT, INSERT, DELETE ON outbox_relay.source_samples TO "+ident,
		"GRANT USAGE ON SEQUENCE outbox_relay.failed_event_audit_id_seq TO "+ident)
	cfg := writeCfg(pgtest.WithUser(t, dsn, role))

	// check and run agree: run reads the migrations' version table at
	// start, so without SELECT on it check says so and run does not start.
	out, err := runCLI(t, "--config", cfg, "check", "--skip-sinks")
	if err == nil || !strings.Contains(out, `relay schema: MISSING SELECT on "outbox_relay"."goose_db_version"`) {
		t.Errorf("check without SELECT on the version table: %v\n%s", err, out)
	}
	if out, err := runCLI(t, "--config", cfg, "run"); err == nil || !strings.Contains(err.Error(), "goose_db_version") {
		t.Errorf("run without SELECT on the version table: %v, want it refused naming goose_db_version\n%s", err, out)
	}
	pgtest.Exec(t, pool, "GRANT SELECT ON outbox_relay.goose_db_version TO "+ident)

	out, err = runCLI(t, "--config", cfg, "check", "--skip-sinks", "--strict")
	if err != nil {
		t.Fatalf("check --strict as a role with exactly the needed grants: %v\n%s", err, out)
	}
	if !strings.Contains(out, "databases.main: relay schema outbox_relay: ok") {
		t.Errorf("check output:\n%s", out)
	}

	var big string
	if err := pool.QueryRow(ctx, `INSERT INTO journey_matcher.outbox (aggregate_id, aggregate_type, event_type, payload, correlation_id)
VALUES (gen_random_uuid(), 'journey', $1, jsonb_build_object('blob', repeat('x', 3000)), gen_random_uuid()) RETURNING id::text`, topic).Scan(&big); err != nil {
		t.Fatal(err)
	}
	pgtest.Exec(t, pool, `INSERT INTO journey_matcher.outbox (aggregate_id, aggregate_type, event_type, payload, correlation_id)
SELECT gen_random_uuid(), 'journey', 'journey.created', jsonb_build_object('i', i), gen_random_uuid() FROM generate_series(1, 3) i`)
	col := collect(t, []string{broker}, topic)
	// relayUntilDead runs the relay as the role until the big row has n dead
	// letters and every other row is published.
	relayUntilDead := func(n int) {
		t.Helper()
		stop := runInProcess(t, "--config", cfg, "run") // as check approved it, migrations included
		waitFor(t, 30*time.Second, "the big row dead-lettered, the others published", func() (bool, string) {
			var dead, pending int
			_ = pool.QueryRow(ctx, "SELECT count(*) FROM outbox_relay.failed_events WHERE original_event_id = $1", big).Scan(&dead)
			_ = pool.QueryRow(ctx, "SELECT count(*) FROM journey_matcher.outbox WHERE NOT published").Scan(&pending)
			return dead == n && pending == 0, fmt.Sprintf("%d dead letters, %d rows pending", dead, pending)
		})
		stop()
	}
	relayUntilDead(1)
	col.waitDistinct(t, 3, 10*time.Second)
	var stats int
	if err := pool.QueryRow(ctx, "SELECT count(*) FROM outbox_relay.relay_state WHERE source = 'jm'").Scan(&stats); err != nil || stats != 1 {
		t.Errorf("relay_state rows for jm: %d (%v), want 1", stats, err)
	}
	var dl string
	if err := pool.QueryRow(ctx, "SELECT id::text FROM outbox_relay.failed_events WHERE original_event_id = $1 AND replayed_at IS NULL", big).Scan(&dl); err != nil {
		t.Fatal(err)
	}
	if out, err := runCLI(t, "--config", cfg, "dlq", "replay", "--id", dl); err != nil || !strings.Contains(out, "replayed 1 dead letter(s)") {
		t.Fatalf("dlq replay as the role: %v\n%s", err, out)
	}
	var audits int
	if err := pool.QueryRow(ctx, "SELECT count(*) FROM outbox_relay.failed_event_audit WHERE failed_event_id = $1", dl).Scan(&audits); err != nil || audits != 1 {
		t.Fatalf("audit rows for %s: %d (%v), want 1", dl, audits, err)
	}

	// Without USAGE on the audit table's sequence, check says so, and a
	// replay does fail.
	pgtest.Exec(t, pool, "REVOKE USAGE ON SEQUENCE outbox_relay.failed_event_audit_id_seq FROM "+ident)
	out, err = runCLI(t, "--config", cfg, "check", "--skip-sinks")
	if err == nil || !strings.Contains(out, "relay schema: MISSING USAGE on sequence outbox_relay.failed_event_audit_id_seq") {
		t.Errorf("check without USAGE on the sequence: %v, want MISSING USAGE on sequence outbox_relay.failed_event_audit_id_seq\n%s", err, out)
	}
	relayUntilDead(2) // the replayed row is dead-lettered again
	if err := pool.QueryRow(ctx, "SELECT id::text FROM outbox_relay.failed_events WHERE original_event_id = $1 AND replayed_at IS NULL", big).Scan(&dl); err != nil {
		t.Fatal(err)
	}
	if out, err := runCLI(t, "--config", cfg, "dlq", "replay", "--id", dl); err == nil || !strings.Contains(err.Error(), "permission denied for sequence") {
		t.Errorf("dlq replay without USAGE on the sequence: %v, want permission denied for sequence\n%s", err, out)
	}

	// A table privilege the relay uses.
	pgtest.Exec(t, pool, "GRANT USAGE ON SEQUENCE outbox_relay.failed_event_audit_id_seq TO "+ident,
		"REVOKE DELETE ON outbox_relay.retry_state FROM "+ident)
	out, err = runCLI(t, "--config", cfg, "check", "--skip-sinks")
	if err == nil || !strings.Contains(out, `relay schema: MISSING DELETE on "outbox_relay"."retry_state"`) {
		t.Errorf("check without DELETE on retry_state: %v\n%s", err, out)
	}

	// DELETE on the dead-letter table, which dlq purge (and retention) use:
	// check asks for it, and a purge without it does fail.
	pgtest.Exec(t, pool, "GRANT DELETE ON outbox_relay.retry_state TO "+ident,
		"REVOKE DELETE ON outbox_relay.failed_events FROM "+ident)
	out, err = runCLI(t, "--config", cfg, "check", "--skip-sinks")
	if err == nil || !strings.Contains(out, `relay schema: MISSING DELETE on "outbox_relay"."failed_events"`) {
		t.Errorf("check without DELETE on failed_events: %v\n%s", err, out)
	}
	if out, err := runCLI(t, "--config", cfg, "dlq", "purge", "--id", dl); err == nil || !strings.Contains(err.Error(), "permission denied") {
		t.Errorf("dlq purge without DELETE on failed_events: %v, want permission denied\n%s", err, out)
	}
	pgtest.Exec(t, pool, "GRANT DELETE ON outbox_relay.failed_events TO "+ident)
	if out, err := runCLI(t, "--config", cfg, "dlq", "purge", "--id", dl); err != nil || !strings.Contains(out, "purged 1 dead letter(s)") {
		t.Errorf("dlq purge as the role with the grants check asks for: %v\n%s", err, out)
	}
}
