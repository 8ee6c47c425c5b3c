package e2e

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"strings"
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

// leastPrivilegeRole creates a login role (no password: trust auth) that may
// only use schema journey_matcher, SELECT and UPDATE journey_matcher.outbox,
// and owns the relay's schema outbox_relay. The role and what it owns are
// dropped when the test ends, before pgtest drops the database.
func leastPrivilegeRole(t *testing.T, admin interface {
	Exec(context.Context, string, ...any) (pgconn.CommandTag, error)
}) string {
	t.Helper()
	ctx := context.Background()
	role := "outbox_relay_lp_" + pgtest.Suffix()
	ident := pgx.Identifier{role}.Sanitize()
	if _, err := admin.Exec(ctx, "CREATE ROLE "+ident+" LOGIN"); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		// Runs before pgtest's database drop (t.Cleanup is LIFO): first what
		// the role owns and was granted in the test database, then the role.
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
