package cli_test

import (
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/jackc/pgx/v5/pgxpool"
	"github.com/twmb/franz-go/pkg/kfake"

	"github.com/outbox-relay/outbox-relay/internal/cli"
	"github.com/outbox-relay/outbox-relay/internal/fixtures"
	"github.com/outbox-relay/outbox-relay/internal/pgtest"
)

// runCLI runs the command line in this process until it returns or ctx
// ends, and returns what it printed (stdout, then stderr) and its error.
func runCLI(ctx context.Context, args ...string) (string, error) {
	var out, errOut bytes.Buffer
	root := cli.NewRoot(&out, &errOut)
	root.SetArgs(args)
	err := root.ExecuteContext(ctx)
	return out.String() + errOut.String(), err
}

func cliOK(t *testing.T, args ...string) string {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	out, err := runCLI(ctx, args...)
	if err != nil {
		t.Fatalf("%s: %v\n%s", strings.Join(args, " "), err, out)
	}
	return out
}

func cliErr(t *testing.T, args ...string) (string, error) {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	out, err := runCLI(ctx, args...)
	if err == nil {
		t.Fatalf("%s succeeded, want an error\n%s", strings.Join(args, " "), out)
	}
	return out, err
}

// writeConfig writes a config file with one database and one Kafka sink and
// the given sources section (YAML, indented as a list under sources:).
func writeConfig(t *testing.T, dsn, brokers, sinkExtra, sources string) string {
	t.Helper()
	p := filepath.Join(t.TempDir(), "relay.yaml")
	cfg := fmt.Sprintf(`log: {level: warn, format: text}
admin: {listen: "off"}
shutdown: {timeout: 5s}
databases:
  main:
    dsn: %q
sinks:
  kafka:
    type: kafka
    brokers: [%q]
%ssources:
%s`, dsn, brokers, sinkExtra, sources)
	if err := os.WriteFile(p, []byte(cfg), 0o600); err != nil {
		t.Fatal(err)
	}
	return p
}

const jmSource = `  - name: jm
    table: journey_matcher.outbox
    preset: published-flag
    poll: {min: 5ms, max: 50ms}
`

func waitFor(t *testing.T, timeout time.Duration, what string, cond func() (bool, string)) {
	t.Helper()
	deadline := time.Now().Add(timeout)
	for {
		ok, status := cond()
		if ok {
			return
		}
		if time.Now().After(deadline) {
			t.Fatalf("timed out after %s waiting for %s: %s", timeout, what, status)
		}
		time.Sleep(20 * time.Millisecond)
	}
}

func count(t *testing.T, pool *pgxpool.Pool, q string, args ...any) int {
	t.Helper()
	var n int
	if err := pool.QueryRow(context.Background(), q, args...).Scan(&n); err != nil {
		t.Fatalf("%s: %v", q, err)
	}
	return n
}

// TestRunRejectsBadConfig: `run` fails at start, before relaying anything,
// with an error that names the offending field.
func TestRunRejectsBadConfig(t *testing.T) {
	t.Parallel()
	dsn, pool := pgtest.NewDB(t)
	pgtest.Exec(t, pool, fixtures.Seed000)
	pgtest.Exec(t, pool, `INSERT INTO journey_matcher.outbox (aggregate_id, aggregate_type, event_type, payload, correlation_id)
VALUES (gen_random_uuid(), 'journey', 'journey.created', '{}', gen_random_uuid())`)
	c, err := kfake.NewCluster(kfake.NumBrokers(1), kfake.SeedTopics(1, "journey.created"))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(c.Close)
	brokers := c.ListenAddrs()[0]
	// Migrate first, so that subtests running at once do not race to
	// create the relay's schema.
	cliOK(t, "--config", writeConfig(t, dsn, brokers, "", jmSource), "migrate", "up")

	cases := []struct {
		name      string
		sinkExtra string
		sources   string
		want      []string
	}{
		{"batch_size 0", "", jmSource + "    batch_size: 0\n",
			[]string{"sources[0].batch_size: must be between 1 and 10000, got 0"}},
		{"pipeline too large", "", jmSource + "    pipeline: 1000\n",
			[]string{"sources[0].pipeline: must be between 1 and 64, got 1000"}},
		{"unknown key", "", jmSource + "    batch_sise: 10\n",
			[]string{`sources[0]: unknown field "batch_sise"`, "line "}},
		{"wrong type", "", jmSource + "    batch_size: many\n",
			[]string{"sources[0].batch_size"}},
		{"bad duration", "", "  - name: jm\n    table: journey_matcher.outbox\n    preset: published-flag\n    poll: {min: 5 ms}\n",
			[]string{"sources[0].poll.min"}},
		{"unknown sink key", "    max_mesage_bytes: 10\n", jmSource,
			[]string{`sinks.kafka: unknown field "max_mesage_bytes"`}},
		{"unknown preset", "", "  - name: jm\n    table: journey_matcher.outbox\n    preset: debezium\n",
			[]string{`sources[0].preset: unknown preset "debezium"`, "published-flag"}},
		{"layout column missing", "", jmSource + "    layout: {payload: pay}\n",
			[]string{`sources[0].layout.payload: column "pay" not found in "journey_matcher"."outbox"`}},
		{"state column missing", "", jmSource + "    layout: {state: {flag: sent}}\n",
			[]string{`sources[0].layout.state.flag: column "sent" not found`}},
		{"topic column missing", "", jmSource + "    topic: \"events.{kind}\"\n",
			[]string{`sources[0].topic`, `column "kind" not found`}},
		{"bad template", "", jmSource + "    layout: {key: \"{aggregate_id\"}\n",
			[]string{`sources[0].layout.key`}},
		{"no such table", "", "  - name: jm\n    table: journey_matcher.outbx\n    preset: published-flag\n",
			[]string{`sources[0].table`, "outbx"}},
		{"second source", "", jmSource + "  - name: jm2\n    table: journey_matcher.outbox\n    preset: published-flag\n    layout: {id: uuid}\n",
			[]string{`sources[1].layout.id: column "uuid" not found`}},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			cfg := writeConfig(t, dsn, brokers, tc.sinkExtra, tc.sources)
			ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
			defer cancel()
			start := time.Now()
			out, err := runCLI(ctx, "--config", cfg, "run")
			if err == nil {
				t.Fatalf("run succeeded, want an error\n%s", out)
			}
			if ctx.Err() != nil {
				t.Fatalf("run did not fail at start; it ran until the test gave up (%v)", err)
			}
			for _, w := range tc.want {
				if !strings.Contains(err.Error(), w) {
					t.Errorf("error %q\ndoes not contain %q", err, w)
				}
			}
			t.Logf("failed after %s: %v", time.Since(start).Round(time.Millisecond), err)
		})
	}
	t.Cleanup(func() {
		// Nothing was relayed by any of the bad configurations.
		if n := count(t, pool, "SELECT count(*) FROM journey_matcher.outbox WHERE published"); n != 0 {
			t.Errorf("%d rows were published by a relay with a bad config", n)
		}
	})
}

// TestExecuteExitCode: Execute prints the error and returns 1.
func TestExecuteExitCode(t *testing.T) {
	t.Parallel()
	p := filepath.Join(t.TempDir(), "relay.yaml")
	if err := os.WriteFile(p, []byte("databases:\n  main: {dsn: postgres://x@127.0.0.1:1/x}\nsinks:\n  kafka: {type: kafka, brokers: [127.0.0.1:1]}\nsources:\n  - {name: a, table: public.outbox, batch_size: 0}\n"), 0o600); err != nil {
		t.Fatal(err)
	}
	var out, errOut bytes.Buffer
	code := cli.Execute(context.Background(), []string{"--config", p, "run"}, &out, &errOut)
	if code != 1 {
		t.Errorf("exit code %d, want 1", code)
	}
	if !strings.Contains(errOut.String(), "error: ") || !strings.Contains(errOut.String(), "sources[0].batch_size") {
		t.Errorf("stderr %q", errOut.String())
	}
	if code := cli.Execute(context.Background(), []string{"--config", filepath.Join(t.TempDir(), "missing.yaml"), "check"}, &out, &errOut); code != 1 {
		t.Errorf("missing config: exit code %d, want 1", code)
	}
}

// migrationStates parses `migrate status`: version -> applied|pending.
func migrationStates(t *testing.T, out string) map[string]string {
	t.Helper()
	m := map[string]string{}
	for line := range strings.Lines(out) {
		f := strings.Fields(line)
		if len(f) != 4 || f[0] != "main" {
			t.Fatalf("migrate status line %q, want: main <version> <state> <name>", line)
		}
		m[f[1]] = f[2]
	}
	if len(m) == 0 {
		t.Fatalf("migrate status listed no migrations:\n%s", out)
	}
	return m
}

func allIn(m map[string]string, state string) bool {
	for _, s := range m {
		if s != state {
			return false
		}
	}
	return true
}

func TestMigrateUpStatusDown(t *testing.T) {
	t.Parallel()
	dsn, pool := pgtest.NewDB(t)
	cfg := writeConfig(t, dsn, "127.0.0.1:1", "", jmSource)
	schemaExists := func() bool {
		return count(t, pool, "SELECT count(*) FROM pg_namespace WHERE nspname = 'outbox_relay'") == 1
	}

	st := migrationStates(t, cliOK(t, "--config", cfg, "migrate", "status"))
	if !allIn(st, "pending") || schemaExists() {
		t.Fatalf("fresh database: status %v, schema exists %v; want all pending, no schema", st, schemaExists())
	}
	total := len(st)

	// up and down say what they did.
	if out := cliOK(t, "--config", cfg, "migrate", "up"); strings.Count(out, "main: applied ") != total ||
		!strings.Contains(out, fmt.Sprintf("main: up to date (%d applied)", total)) {
		t.Errorf("migrate up on a fresh database printed %q, want each of the %d migrations named", out, total)
	}
	st = migrationStates(t, cliOK(t, "--config", cfg, "migrate", "status"))
	if len(st) != total || !allIn(st, "applied") {
		t.Fatalf("after up: %v, want all %d applied", st, total)
	}
	for _, tbl := range []string{"relay_state", "failed_events", "failed_event_audit", "retry_state", "leases"} {
		if count(t, pool, "SELECT count(*) FROM pg_tables WHERE schemaname = 'outbox_relay' AND tablename = $1", tbl) != 1 {
			t.Errorf("after up: table outbox_relay.%s missing", tbl)
		}
	}
	if out := cliOK(t, "--config", cfg, "migrate", "up"); out != "main: already up to date\n" { // idempotent
		t.Errorf("a second migrate up printed %q", out)
	}

	// One step down: only the newest is pending.
	down := cliOK(t, "--config", cfg, "migrate", "down")
	st = migrationStates(t, cliOK(t, "--config", cfg, "migrate", "status"))
	newest := ""
	for v := range st {
		newest = max(newest, v)
	}
	if !strings.HasPrefix(down, "main: rolled back "+newest+" ") || strings.Count(down, "rolled back") != 1 {
		t.Errorf("migrate down printed %q, want the newest migration %s named", down, newest)
	}
	for v, s := range st {
		if want := map[bool]string{true: "pending", false: "applied"}[v == newest]; s != want {
			t.Errorf("after one down: migration %s is %s, want %s", v, s, want)
		}
	}
	cliOK(t, "--config", cfg, "migrate", "up")

	if out := cliOK(t, "--config", cfg, "migrate", "down", "--all"); strings.Count(out, "main: rolled back ") != total ||
		!strings.Contains(out, "main: relay schema dropped") {
		t.Errorf("migrate down --all printed %q", out)
	}
	if schemaExists() {
		t.Error("migrate down --all left schema outbox_relay")
	}
	st = migrationStates(t, cliOK(t, "--config", cfg, "migrate", "status"))
	if len(st) != total || !allIn(st, "pending") {
		t.Errorf("after down --all: %v, want all %d pending", st, total)
	}
	// And back up from nothing.
	cliOK(t, "--config", cfg, "migrate", "up")
	if !allIn(migrationStates(t, cliOK(t, "--config", cfg, "migrate", "status")), "applied") {
		t.Error("up after down --all did not apply everything")
	}
}

// TestDLQListReplay dead-letters a row that is larger than the sink's
// max_message_bytes, lists it, replays it by id and checks that the row is
// pending again and the replay is audited.
func TestDLQListReplay(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	dsn, pool := pgtest.NewDB(t)
	pgtest.Exec(t, pool, fixtures.Seed000)
	c, err := kfake.NewCluster(kfake.NumBrokers(1), kfake.SeedTopics(1, "journey.created"))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(c.Close)
	cfg := writeConfig(t, dsn, c.ListenAddrs()[0], "    max_message_bytes: 1000\n", jmSource)

	var big, small string
	if err := pool.QueryRow(ctx, `INSERT INTO journey_matcher.outbox (aggregate_id, aggregate_type, event_type, payload, correlation_id)
VALUES (gen_random_uuid(), 'journey', 'journey.created', jsonb_build_object('blob', repeat('x', 3000)), gen_random_uuid()) RETURNING id::text`).Scan(&big); err != nil {
		t.Fatal(err)
	}
	if err := pool.QueryRow(ctx, `INSERT INTO journey_matcher.outbox (aggregate_id, aggregate_type, event_type, payload, correlation_id)
VALUES (gen_random_uuid(), 'journey', 'journey.created', '{"small": true}', gen_random_uuid()) RETURNING id::text`).Scan(&small); err != nil {
		t.Fatal(err)
	}

	// The relay, in this process, until both rows are settled.
	runCtx, stop := context.WithCancel(ctx)
	done := make(chan error, 1)
	var runOut string
	go func() {
		var err error
		runOut, err = runCLI(runCtx, "--config", cfg, "run")
		done <- err
	}()
	waitFor(t, 30*time.Second, "the big row dead-lettered and the small one published", func() (bool, string) {
		var dead, pub int
		_ = pool.QueryRow(ctx, "SELECT count(*) FROM outbox_relay.failed_events WHERE original_event_id = $1", big).Scan(&dead)
		_ = pool.QueryRow(ctx, "SELECT count(*) FROM journey_matcher.outbox WHERE id = $1 AND published AND published_at IS NOT NULL", small).Scan(&pub)
		return dead == 1 && pub == 1, fmt.Sprintf("dead letters %d, small published %d", dead, pub)
	})
	stop()
	select {
	case err := <-done:
		if err != nil {
			t.Fatalf("run: %v\n%s", err, runOut)
		}
	case <-time.After(20 * time.Second):
		t.Fatal("run did not stop after its context was cancelled")
	}

	var dlID, reason string
	var published bool
	if err := pool.QueryRow(ctx, "SELECT id::text, failure_reason FROM outbox_relay.failed_events WHERE original_event_id = $1", big).Scan(&dlID, &reason); err != nil {
		t.Fatal(err)
	}
	if !strings.Contains(reason, "too large") {
		t.Errorf("dead letter reason %q, want it to say too large", reason)
	}
	if err := pool.QueryRow(ctx, "SELECT published FROM journey_matcher.outbox WHERE id = $1", big).Scan(&published); err != nil || !published {
		t.Fatalf("dead-lettered row: published = %v (%v), want true (out of the pending set)", published, err)
	}

	// dlq list shows it.
	out := cliOK(t, "--config", cfg, "dlq", "list")
	lines := strings.Split(strings.TrimSpace(out), "\n")
	if len(lines) != 2 || !strings.HasPrefix(lines[0], "ID") {
		t.Fatalf("dlq list: want a header and one dead letter:\n%s", out)
	}
	for _, w := range []string{dlID, "jm", big, "journey.created", "too large"} {
		if !strings.Contains(lines[1], w) {
			t.Errorf("dlq list line %q does not contain %q", lines[1], w)
		}
	}
	if out := cliOK(t, "--config", cfg, "dlq", "list", "--source", "other"); strings.Contains(out, dlID) {
		t.Errorf("dlq list --source other shows %s:\n%s", dlID, out)
	}

	// replay without a filter is refused and changes nothing.
	out, err = cliErr(t, "--config", cfg, "dlq", "replay")
	if !strings.Contains(err.Error(), "--id") {
		t.Errorf("dlq replay without a filter: %v, want it to name the filters", err)
	}
	if n := count(t, pool, "SELECT count(*) FROM outbox_relay.failed_events WHERE replayed_at IS NOT NULL"); n != 0 {
		t.Fatalf("dlq replay without a filter replayed %d dead letter(s)\n%s", n, out)
	}
	if _, err := cliErr(t, "--config", cfg, "dlq", "replay", "--id", "not-a-uuid", "--database", "nope"); !strings.Contains(err.Error(), "--database") {
		t.Errorf("dlq replay --database nope: %v", err)
	}

	// replay by id.
	if out := cliOK(t, "--config", cfg, "dlq", "replay", "--id", dlID); !strings.Contains(out, "replayed 1 dead letter(s)") {
		t.Errorf("dlq replay printed %q", out)
	}
	var publishedAt *time.Time
	if err := pool.QueryRow(ctx, "SELECT published, published_at FROM journey_matcher.outbox WHERE id = $1", big).Scan(&published, &publishedAt); err != nil {
		t.Fatal(err)
	}
	if published || publishedAt != nil {
		t.Errorf("after replay: published = %v, published_at = %v; want the row pending again", published, publishedAt)
	}
	if n := count(t, pool, "SELECT count(*) FROM outbox_relay.failed_events WHERE id = $1 AND replayed_at IS NOT NULL AND replay_count = 1", dlID); n != 1 {
		t.Error("dead letter not marked replayed")
	}
	var action, actor, detail string
	if err := pool.QueryRow(ctx, "SELECT action, actor, detail FROM outbox_relay.failed_event_audit WHERE failed_event_id = $1", dlID).Scan(&action, &actor, &detail); err != nil {
		t.Fatalf("audit row for %s: %v", dlID, err)
	}
	if action != "replay" || actor == "" || !strings.Contains(detail, big) {
		t.Errorf("audit row: action %q actor %q detail %q", action, actor, detail)
	}
	if n := count(t, pool, "SELECT count(*) FROM outbox_relay.failed_event_audit"); n != 1 {
		t.Errorf("%d audit rows, want 1", n)
	}

	// purge needs ids, and leaves a replayed dead letter alone.
	if _, err := cliErr(t, "--config", cfg, "dlq", "purge"); !strings.Contains(err.Error(), "--id") {
		t.Errorf("dlq purge without --id: %v", err)
	}
	if out := cliOK(t, "--config", cfg, "dlq", "purge", "--id", dlID); !strings.Contains(out, "purged 0 dead letter(s)") {
		t.Errorf("dlq purge of a replayed dead letter printed %q", out)
	}

	// Replayed dead letters leave the default list, and stay in --replayed.
	if out := cliOK(t, "--config", cfg, "dlq", "list"); strings.Contains(out, dlID) {
		t.Errorf("dlq list still shows the replayed dead letter:\n%s", out)
	}
	if out := cliOK(t, "--config", cfg, "dlq", "list", "--replayed"); !strings.Contains(out, dlID) {
		t.Errorf("dlq list --replayed does not show it:\n%s", out)
	}
	// A second replay by id finds nothing open.
	if out := cliOK(t, "--config", cfg, "dlq", "replay", "--id", dlID); !strings.Contains(out, "replayed 0 dead letter(s)") {
		t.Errorf("second replay printed %q", out)
	}
}

func TestVersion(t *testing.T) {
	var v struct {
		Version, Commit string
	}
	out := cliOK(t, "version", "--json")
	if err := json.Unmarshal([]byte(out), &v); err != nil {
		t.Fatalf("version --json printed %q: %v", out, err)
	}
	if v.Version == "" || v.Commit == "" {
		t.Fatalf("version --json printed %q", out)
	}
	if out := cliOK(t, "--version"); !strings.HasPrefix(out, "outbox-relay "+v.Version+" (commit "+v.Commit) {
		t.Fatalf("--version printed %q", out)
	}
}

// TestHelpSaysWhatCommandsTake: commands that need no configuration do not
// list --config, bench explains its workloads, check its flags.
func TestHelpSaysWhatCommandsTake(t *testing.T) {
	for _, args := range [][]string{{"demo", "--help"}, {"bench", "--help"}} {
		if out := cliOK(t, args...); strings.Contains(out, "--config") {
			t.Errorf("%v lists --config, which it ignores:\n%s", args, out)
		}
	}
	bench := cliOK(t, "bench", "--help")
	for _, w := range []string{"drain ", "steady ", "sparse ", "keys ", "idle ", "handover "} {
		if !strings.Contains(bench, "\n  "+w) {
			t.Errorf("bench --help does not explain %q:\n%s", w, bench)
		}
	}
	if out := cliOK(t, "check", "--help"); !strings.Contains(out, "--skip-sinks") || !strings.Contains(out, "--config") {
		t.Errorf("check --help:\n%s", out)
	}
	if out := cliOK(t, "--help"); strings.Contains(out, "PostgreSQL to Kafka") || !strings.Contains(out, "NATS JetStream") {
		t.Errorf("root help:\n%s", out)
	}
}
