package cli_test

import (
	"bytes"
	"context"
	"fmt"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/jackc/pgx/v5/pgxpool"
	"github.com/twmb/franz-go/pkg/kfake"

	"github.com/outbox-relay/outbox-relay/internal/cli"
	"github.com/outbox-relay/outbox-relay/internal/fixtures"
	"github.com/outbox-relay/outbox-relay/internal/pgtest"
	"github.com/outbox-relay/outbox-relay/internal/source/postgres"
)

const waSource = `  - name: wa
    table: whatsapp_handler.outbox_events
    preset: published-flag
`

// insertJourneys inserts n journey_matcher rows created `created` ago;
// published ones were published `published` ago.
func insertJourneys(t *testing.T, pool *pgxpool.Pool, n int, created, published time.Duration, isPublished bool) {
	t.Helper()
	_, err := pool.Exec(context.Background(), `INSERT INTO journey_matcher.outbox
  (aggregate_id, aggregate_type, event_type, payload, correlation_id, created_at, published, published_at)
SELECT gen_random_uuid(), 'journey', 'journey.created', jsonb_build_object('n', i), gen_random_uuid(),
  now() - make_interval(secs => $2), $4, CASE WHEN $4 THEN now() - make_interval(secs => $3) END
FROM generate_series(1, $1) i`, n, created.Seconds(), published.Seconds(), isPublished)
	if err != nil {
		t.Fatal(err)
	}
}

// sourceLine returns the line the command printed for a source.
func sourceLine(t *testing.T, out, source string) string {
	t.Helper()
	for line := range strings.Lines(out) {
		if strings.HasPrefix(line, source+" (") {
			return strings.TrimSpace(line)
		}
	}
	t.Fatalf("no line for source %s in:\n%s", source, out)
	return ""
}

func TestRetentionCommand(t *testing.T) {
	t.Parallel()
	dsn, pool := pgtest.NewDB(t)
	pgtest.Exec(t, pool, fixtures.Seed000)
	cfg := writeConfig(t, dsn, "127.0.0.1:1", "", jmSource+waSource)
	cliOK(t, "--config", cfg, "migrate", "up")

	const month, hour = 30 * 24 * time.Hour, time.Hour
	insertJourneys(t, pool, 50, month, month, true) // old and delivered: deleted
	insertJourneys(t, pool, 5, hour, hour, true)    // delivered an hour ago: kept
	insertJourneys(t, pool, 5, month, 0, false)     // old but pending: kept
	insertJourneys(t, pool, 2, month, 0, false)     // old dead letters, below
	pgtest.Exec(t, pool, `WITH d AS (
  UPDATE journey_matcher.outbox SET published = true
  WHERE id IN (SELECT id FROM journey_matcher.outbox WHERE NOT published ORDER BY id LIMIT 2) RETURNING id)
INSERT INTO outbox_relay.failed_events (original_event_id, source, source_schema, source_table, failure_reason)
SELECT id::text, 'jm', 'journey_matcher', 'outbox', 'rejected' FROM d`)
	total := func() int { return count(t, pool, "SELECT count(*) FROM journey_matcher.outbox") }

	out := cliOK(t, "--config", cfg, "retention", "--older-than", "7d", "--include-dead", "--dry-run")
	if l := sourceLine(t, out, "jm"); !strings.Contains(l, "would delete 50 published, 2 dead") {
		t.Errorf("dry run: %q", l)
	}
	if l := sourceLine(t, out, "wa"); !strings.Contains(l, "would delete 0 published, 0 dead") {
		t.Errorf("dry run, empty source: %q", l)
	}
	if n := total(); n != 62 {
		t.Fatalf("dry run left %d rows, want all 62", n)
	}

	out = cliOK(t, "--config", cfg, "retention", "--older-than", "168h", "--batch-size", "8", "--pause", "1ms", "--source", "jm")
	if l := sourceLine(t, out, "jm"); !strings.Contains(l, "deleted 50 published, 0 dead in 7 batch(es)") {
		t.Errorf("retention: %q", l)
	}
	if strings.Contains(out, "wa (") {
		t.Errorf("--source jm also ran source wa:\n%s", out)
	}
	if n := total(); n != 12 {
		t.Errorf("%d rows left, want 12 (5 recent, 5 pending, 2 dead letters)", n)
	}
	if n := count(t, pool, "SELECT count(*) FROM journey_matcher.outbox WHERE NOT published"); n != 5 {
		t.Errorf("%d pending rows left, want 5", n)
	}

	out = cliOK(t, "--config", cfg, "retention", "--older-than", "7d", "--include-dead")
	if l := sourceLine(t, out, "jm"); !strings.Contains(l, "deleted 0 published, 2 dead") {
		t.Errorf("retention --include-dead: %q", l)
	}
	if n := total(); n != 10 {
		t.Errorf("%d rows left, want 10", n)
	}

	out = cliOK(t, "--config", cfg, "optimize")
	for _, src := range []string{"jm", "wa"} {
		if l := sourceLine(t, out, src); !strings.Contains(l, "vacuumed and analyzed") || !strings.Contains(l, "dead tuples") {
			t.Errorf("optimize: %q", l)
		}
	}
	if n := count(t, pool, "SELECT count(*) FROM pg_stat_all_tables WHERE relid = 'journey_matcher.outbox'::regclass AND last_vacuum IS NOT NULL"); n != 1 {
		t.Error("optimize did not vacuum journey_matcher.outbox")
	}

	for _, tc := range []struct {
		args []string
		want string
	}{
		{[]string{"retention"}, "--older-than is required"},
		{[]string{"retention", "--older-than", "0s"}, "more than zero"},
		{[]string{"retention", "--older-than", "a week"}, "invalid age"},
		{[]string{"retention", "--older-than", "7d", "--batch-size", "0"}, "--batch-size"},
		{[]string{"retention", "--older-than", "7d", "--source", "nope"}, `no source named "nope"`},
		{[]string{"optimize", "--source", "nope"}, `no source named "nope"`},
	} {
		_, err := cliErr(t, append([]string{"--config", cfg}, tc.args...)...)
		if !strings.Contains(err.Error(), tc.want) {
			t.Errorf("%v: %v, want it to say %q", tc.args, err, tc.want)
		}
	}
	if n := total(); n != 10 {
		t.Errorf("the failed commands changed the table: %d rows", n)
	}
}

// TestRetentionExitCode: a source that fails makes the command exit 1
// after the other sources ran, and its line says why.
func TestRetentionExitCode(t *testing.T) {
	t.Parallel()
	dsn, pool := pgtest.NewDB(t)
	pgtest.Exec(t, pool, fixtures.Seed000)
	// A source with no column to date its rows by cannot be purged.
	pgtest.Exec(t, pool, "CREATE TABLE public.ev (id bigserial PRIMARY KEY, topic text NOT NULL, payload jsonb NOT NULL, done boolean NOT NULL DEFAULT false)")
	cfg := writeConfig(t, dsn, "127.0.0.1:1", "", jmSource+`  - name: ev
    table: public.ev
    layout: {id: id, payload: payload, topic: "{topic}", state: {mode: flag, flag: done}}
`)
	cliOK(t, "--config", cfg, "migrate", "up")
	insertJourneys(t, pool, 3, 30*24*time.Hour, 30*24*time.Hour, true)
	var out, errOut bytes.Buffer
	code := cli.Execute(context.Background(), []string{"--config", cfg, "retention", "--older-than", "7d"}, &out, &errOut)
	if code != 1 {
		t.Errorf("exit code %d, want 1\n%s%s", code, out.String(), errOut.String())
	}
	if l := sourceLine(t, out.String(), "ev"); !strings.Contains(l, "FAILED") || !strings.Contains(l, "created-at") {
		t.Errorf("failing source's line: %q", l)
	}
	if l := sourceLine(t, out.String(), "jm"); !strings.Contains(l, "deleted 3 published") {
		t.Errorf("the other source's line: %q", l)
	}
	if !strings.Contains(errOut.String(), "1 of 2 sources failed: ev") {
		t.Errorf("stderr %q", errOut.String())
	}
}

// TestRetentionWhileRelayRuns runs retention beside a relay that is
// publishing new rows: the relay publishes every one of them, none is
// dead-lettered, and retention deletes exactly the old delivered rows.
func TestRetentionWhileRelayRuns(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	dsn, pool := pgtest.NewDB(t)
	pgtest.Exec(t, pool, fixtures.Seed000)
	c, err := kfake.NewCluster(kfake.NumBrokers(1), kfake.SeedTopics(1, "journey.created"))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(c.Close)
	cfg := writeConfig(t, dsn, c.ListenAddrs()[0], "", jmSource)
	cliOK(t, "--config", cfg, "migrate", "up")
	const old, fresh = 600, 200
	insertJourneys(t, pool, old, 31*24*time.Hour, 30*24*time.Hour, true)

	runCtx, stop := context.WithCancel(ctx)
	defer stop()
	done := make(chan error, 1)
	var runOut string
	go func() {
		var err error
		runOut, err = runCLI(runCtx, "--config", cfg, "run")
		done <- err
	}()

	// The relay is running once it has published a first row.
	insertJourneys(t, pool, 10, 0, 0, false)
	waitFor(t, 30*time.Second, "the relay publishing", func() (bool, string) {
		n := count(t, pool, "SELECT count(*) FROM journey_matcher.outbox WHERE published_at > now() - interval '1 hour'")
		return n == 10, fmt.Sprintf("%d of 10 published", n)
	})
	// More rows arrive while retention runs.
	var (
		wg       sync.WaitGroup
		writeErr error
	)
	wg.Go(func() {
		for range fresh/10 - 1 {
			if _, writeErr = pool.Exec(ctx, `INSERT INTO journey_matcher.outbox (aggregate_id, aggregate_type, event_type, payload, correlation_id)
SELECT gen_random_uuid(), 'journey', 'journey.created', '{}', gen_random_uuid() FROM generate_series(1, 10)`); writeErr != nil {
				return
			}
			time.Sleep(10 * time.Millisecond)
		}
	})
	rctx, cancel := context.WithTimeout(ctx, 60*time.Second)
	defer cancel()
	out, err := runCLI(rctx, "--config", cfg, "retention", "--older-than", "7d", "--batch-size", "25", "--pause", "5ms")
	wg.Wait()
	if writeErr != nil {
		t.Fatal(writeErr)
	}
	if err != nil {
		t.Fatalf("retention beside the relay: %v\n%s", err, out)
	}
	if l := sourceLine(t, out, "jm"); !strings.Contains(l, fmt.Sprintf("deleted %d published, 0 dead", old)) {
		t.Errorf("retention beside the relay: %q", l)
	}
	waitFor(t, 30*time.Second, "every new row published", func() (bool, string) {
		n := count(t, pool, "SELECT count(*) FROM journey_matcher.outbox WHERE published AND published_at IS NOT NULL")
		return n == fresh, fmt.Sprintf("%d of %d published", n, fresh)
	})
	if n := count(t, pool, "SELECT count(*) FROM journey_matcher.outbox"); n != fresh {
		t.Errorf("%d rows left, want the %d new ones", n, fresh)
	}
	if n := count(t, pool, "SELECT count(*) FROM outbox_relay.failed_events"); n != 0 {
		t.Errorf("%d rows dead-lettered while retention ran", n)
	}
	// A second run beside the relay finds nothing old.
	if out := cliOK(t, "--config", cfg, "retention", "--older-than", "7d"); !strings.Contains(sourceLine(t, out, "jm"), "deleted 0 published") {
		t.Errorf("second run: %q", out)
	}
	stop()
	select {
	case err := <-done:
		if err != nil {
			t.Fatalf("run: %v\n%s", err, runOut)
		}
	case <-time.After(20 * time.Second):
		t.Fatal("run did not stop after its context was cancelled")
	}
}

// TestRelayAppliesRetention: a source with a retention block has the
// running relay delete its old delivered rows, at start and then every
// interval; rows it publishes now are dated by their publication and stay.
func TestRelayAppliesRetention(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	dsn, pool := pgtest.NewDB(t)
	pgtest.Exec(t, pool, fixtures.Seed000)
	c, err := kfake.NewCluster(kfake.NumBrokers(1), kfake.SeedTopics(1, "journey.created"))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(c.Close)
	cfg := writeConfig(t, dsn, c.ListenAddrs()[0], "", jmSource+"    retention: {older_than: 168h, interval: 1s}\n")
	const month = 30 * 24 * time.Hour
	insertJourneys(t, pool, 30, month, month, true)        // old and delivered: deleted
	insertJourneys(t, pool, 5, time.Hour, time.Hour, true) // recent: kept
	insertJourneys(t, pool, 5, month, 0, false)            // old but pending: published now, then kept

	runCtx, stop := context.WithCancel(ctx)
	defer stop()
	done := make(chan error, 1)
	var runOut string
	go func() {
		var err error
		runOut, err = runCLI(runCtx, "--config", cfg, "run")
		done <- err
	}()
	settled := func(want int) func() (bool, string) {
		return func() (bool, string) {
			total := count(t, pool, "SELECT count(*) FROM journey_matcher.outbox")
			pending := count(t, pool, "SELECT count(*) FROM journey_matcher.outbox WHERE NOT published")
			return total == want && pending == 0, fmt.Sprintf("%d rows, %d pending; want %d, none pending", total, pending, want)
		}
	}
	waitFor(t, 30*time.Second, "the old delivered rows deleted and the rest published", settled(10))
	// Later old rows go at a later interval.
	insertJourneys(t, pool, 7, month, month, true)
	waitFor(t, 30*time.Second, "the rows aged since deleted", settled(10))
	if n := count(t, pool, "SELECT count(*) FROM journey_matcher.outbox WHERE created_at < now() - interval '7 days'"); n != 5 {
		t.Errorf("%d old rows left, want the 5 published just now", n)
	}
	stop()
	select {
	case err := <-done:
		if err != nil {
			t.Fatalf("run: %v\n%s", err, runOut)
		}
	case <-time.After(20 * time.Second):
		t.Fatal("run did not stop after its context was cancelled")
	}
}

// TestRetentionOnlyByLeaseHolder: a relay standing by while another process
// holds the source's lease applies no retention; once it takes the lease
// over, it does.
func TestRetentionOnlyByLeaseHolder(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	dsn, pool := pgtest.NewDB(t)
	pgtest.Exec(t, pool, fixtures.Seed000)
	cfg := writeConfig(t, dsn, "127.0.0.1:1", "lease_ttl: 3s\n", jmSource+"    retention: {older_than: 168h, interval: 1s}\n")
	cliOK(t, "--config", cfg, "migrate", "up")
	insertJourneys(t, pool, 20, 30*24*time.Hour, 30*24*time.Hour, true)

	// Another live process holds the lease.
	pc, err := pgxpool.ParseConfig(dsn)
	if err != nil {
		t.Fatal(err)
	}
	pc.ConnConfig.RuntimeParams["application_name"] = postgres.ApplicationName("other-replica")
	holderPool, err := pgxpool.NewWithConfig(ctx, pc)
	if err != nil {
		t.Fatal(err)
	}
	defer holderPool.Close()
	leases := postgres.NewLeases(holderPool, "outbox_relay", "other-replica")
	lease, err := leases.Acquire(ctx, "jm", time.Minute)
	if err != nil || lease == nil {
		t.Fatalf("acquire: %v %v", lease, err)
	}

	runCtx, stop := context.WithCancel(ctx)
	defer stop()
	done := make(chan error, 1)
	var runOut string
	go func() {
		var err error
		runOut, err = runCLI(runCtx, "--config", cfg, "run")
		done <- err
	}()
	time.Sleep(3 * time.Second)
	if n := count(t, pool, "SELECT count(*) FROM journey_matcher.outbox"); n != 20 {
		t.Fatalf("a relay standing by deleted rows: %d of 20 left", n)
	}
	if err := leases.Release(ctx, lease); err != nil {
		t.Fatal(err)
	}
	waitFor(t, 20*time.Second, "the new lease holder deleting the old rows", func() (bool, string) {
		n := count(t, pool, "SELECT count(*) FROM journey_matcher.outbox")
		return n == 0, fmt.Sprintf("%d rows left", n)
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
}
