package e2e

import (
	"context"
	"encoding/json"
	"fmt"
	"io"
	"net/http"
	"regexp"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/twmb/franz-go/pkg/kadm"
	"github.com/twmb/franz-go/pkg/kfake"
	"github.com/twmb/franz-go/pkg/kgo"

	"github.com/outbox-relay/outbox-relay/internal/app"
	"github.com/outbox-relay/outbox-relay/internal/config"
	"github.com/outbox-relay/outbox-relay/internal/fixtures"
	"github.com/outbox-relay/outbox-relay/internal/pgtest"
	"github.com/outbox-relay/outbox-relay/internal/source/postgres"
)

func httpGet(t *testing.T, url string) (int, string) {
	t.Helper()
	resp, err := http.Get(url)
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	b, _ := io.ReadAll(resp.Body)
	return resp.StatusCode, string(b)
}

// metricValue reads one sample from a Prometheus text exposition.
func metricValue(t *testing.T, body, name string, labels ...string) float64 {
	t.Helper()
	for _, line := range strings.Split(body, "\n") {
		if !strings.HasPrefix(line, name+"{") && !strings.HasPrefix(line, name+" ") {
			continue
		}
		ok := true
		for _, l := range labels {
			ok = ok && strings.Contains(line, l)
		}
		if !ok {
			continue
		}
		f := strings.Fields(line)
		v, err := strconv.ParseFloat(f[len(f)-1], 64)
		if err != nil {
			t.Fatalf("parse %q: %v", line, err)
		}
		return v
	}
	t.Fatalf("metric %s%v not found", name, labels)
	return 0
}

// TestOperations covers what an operator sees: metrics, health, readiness,
// relay_state, the wake-up trigger (a row arrives long before the next
// poll), and a clean stop.
func TestOperations(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	dsn, pool := pgtest.NewDB(t)
	pgtest.Exec(t, pool, fixtures.Seed001)
	c := kafkaCluster(t, kfake.SeedTopics(2, "ops"))
	brokers := c.ListenAddrs()
	col := collect(t, brokers, "ops")
	cfg := baseConfig(dsn, brokers, config.Source{
		Name: "ops", Table: "public.outbox", Preset: "status",
		// Polls are 10 s apart: only NOTIFY can deliver a row quickly.
		Poll: config.Poll{Min: config.Duration(10 * time.Second), Max: config.Duration(10 * time.Second)},
	})
	cfg.Admin.Listen = "127.0.0.1:0"
	a, stop := runApp(t, cfg, app.WithStatsInterval(100*time.Millisecond))
	waitFor(t, 10*time.Second, "the admin server", func() (bool, string) { return a.AdminAddr() != "", "" })
	base := "http://" + a.AdminAddr()

	// Let the first (empty) claim happen, so the worker sleeps on its poll.
	waitFor(t, 10*time.Second, "the source to be ready", func() (bool, string) {
		code, body := httpGet(t, base+"/readyz")
		return code == 200, body
	})
	waitFor(t, 10*time.Second, "the first claim", func() (bool, string) {
		return gathered(t, a, "outbox_relay_last_claim_timestamp_seconds", "source", "ops") > 0, "none yet"
	})
	var trig int
	_ = pool.QueryRow(ctx, "SELECT count(*) FROM pg_trigger WHERE tgname = 'outbox_relay_notify'").Scan(&trig)
	if trig != 1 {
		t.Fatalf("wake-up trigger not installed")
	}
	insert := func(topic string, n int) {
		for i := range n {
			pgtest.Exec(t, pool, fmt.Sprintf(`INSERT INTO outbox (aggregate_type, aggregate_id, event_type, topic, payload)
VALUES ('Op', gen_random_uuid(), 'op.done', '%s', '{"i": %d}')`, topic, i))
		}
	}
	start := time.Now()
	insert("ops", 5)
	col.waitDistinct(t, 5, 5*time.Second)
	if d := time.Since(start); d > 3*time.Second {
		t.Fatalf("rows took %s with polls 10 s apart: the NOTIFY wake-up did not work", d)
	}
	insert("", 1) // empty topic: dead-lettered at once

	var body string
	waitFor(t, 10*time.Second, "metrics to show the dead letter", func() (bool, string) {
		_, body = httpGet(t, base+"/metrics")
		return strings.Contains(body, `outbox_relay_failed_events{source="ops"} 1`) &&
			strings.Contains(body, `outbox_relay_oldest_pending_age_seconds{source="ops"} 0`), "not yet"
	})
	if v := metricValue(t, body, "outbox_relay_events_published_total", `source="ops"`); v != 5 {
		t.Errorf("published_total = %v, want 5", v)
	}
	if v := metricValue(t, body, "outbox_relay_events_dead_lettered_total", `source="ops"`, `reason="terminal"`); v != 1 {
		t.Errorf("dead_lettered_total = %v, want 1", v)
	}
	for _, name := range []string{"outbox_relay_batch_duration_seconds_bucket", "outbox_relay_publish_duration_seconds_bucket",
		"outbox_relay_commit_to_publish_seconds_bucket", "outbox_relay_notify_wakeups_total"} {
		if !strings.Contains(body, name) {
			t.Errorf("metrics lack %s", name)
		}
	}
	if !regexp.MustCompile(`(?m)^outbox_relay_kafka_\w+`).MatchString(body) {
		t.Errorf("metrics lack the Kafka client's")
	}
	if code, _ := httpGet(t, base+"/healthz"); code != 200 {
		t.Errorf("healthz %d", code)
	}
	if code, body := httpGet(t, base+"/health"); code != 200 || !strings.Contains(body, "source:ops") {
		t.Errorf("health (the runbooks' name for readyz) %d %s", code, body)
	}
	code, ready := httpGet(t, base+"/readyz")
	var rb map[string]any
	if code != 200 || json.Unmarshal([]byte(ready), &rb) != nil || !strings.Contains(ready, "source:ops") || !strings.Contains(ready, "database:main") {
		t.Errorf("readyz %d %s", code, ready)
	}
	waitFor(t, 10*time.Second, "relay_state totals", func() (bool, string) {
		var pub, dead int
		var last time.Time
		_ = pool.QueryRow(ctx, "SELECT total_events_published, total_events_dead_lettered, last_poll_time FROM outbox_relay.relay_state WHERE source = 'ops'").Scan(&pub, &dead, &last)
		return pub == 5 && dead == 1 && time.Since(last) < time.Minute, fmt.Sprintf("published %d, dead %d, last poll %v", pub, dead, last)
	})
	var leaseOwner string
	_ = pool.QueryRow(ctx, "SELECT owner FROM outbox_relay.leases WHERE shard = 'ops' AND expires_at > now()").Scan(&leaseOwner)
	if leaseOwner == "" {
		t.Error("no live lease for the running source")
	}

	// A stop returns promptly and gives the lease back.
	stopped := time.Now()
	stop()
	if d := time.Since(stopped); d > 5*time.Second {
		t.Errorf("stop took %s", d)
	}
	var live int
	_ = pool.QueryRow(ctx, "SELECT count(*) FROM outbox_relay.leases WHERE expires_at > now()").Scan(&live)
	if live != 0 {
		t.Errorf("%d leases still live after stop", live)
	}
}

// TestReplicasOneOwner runs two relays on one source: one relays, the other
// stands by; when the first stops, the second takes over and relays the rest,
// and per-key order holds through the hand-over.
func TestReplicasOneOwner(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	dsn, pool := pgtest.NewDB(t)
	pgtest.Exec(t, pool, fixtures.Seed000)
	c := kafkaCluster(t, kfake.SeedTopics(4, "journey.created"))
	brokers := c.ListenAddrs()
	col := collect(t, brokers, "journey.created")
	mk := func() *config.Config {
		cfg := baseConfig(dsn, brokers, config.Source{Name: "jm", Table: "journey_matcher.outbox", Preset: "published-flag", BatchSize: 20})
		cfg.LeaseTTL = config.Duration(time.Second)
		return cfg
	}
	insert := func(from, to int) {
		for i := from; i < to; i++ {
			pgtest.Exec(t, pool, fmt.Sprintf(`INSERT INTO journey_matcher.outbox (aggregate_id, aggregate_type, event_type, payload, correlation_id, created_at)
VALUES ('00000000-0000-0000-0000-00000000000%d', 'j', 'journey.created', '{"seq": %d}', gen_random_uuid(), clock_timestamp())`, i%5, i))
		}
	}
	a1, stop1 := runApp(t, mk())
	waitFor(t, 10*time.Second, "the first replica to hold the source", func() (bool, string) {
		var n int
		_ = pool.QueryRow(ctx, "SELECT count(*) FROM outbox_relay.leases WHERE shard = 'jm' AND expires_at > now()").Scan(&n)
		return n == 1, "no lease"
	})
	a2, stop2 := runApp(t, mk())
	defer stop2()
	insert(0, 100)
	col.waitDistinct(t, 100, 20*time.Second)
	if p1, p2 := published(t, a1, "jm"), published(t, a2, "jm"); p1 == 0 || p2 != 0 {
		t.Fatalf("published by the first replica %v, by the second %v: want all by the first", p1, p2)
	}
	var term1 int64
	_ = pool.QueryRow(ctx, "SELECT term FROM outbox_relay.leases WHERE shard = 'jm'").Scan(&term1)
	stop1()
	insert(100, 200)
	col.waitDistinct(t, 200, 20*time.Second)
	var term2 int64
	_ = pool.QueryRow(ctx, "SELECT term FROM outbox_relay.leases WHERE shard = 'jm'").Scan(&term2)
	if term2 <= term1 {
		t.Fatalf("lease term %d after the hand-over, was %d", term2, term1)
	}
	last := map[string]int{}
	seen := map[int]bool{}
	for _, r := range col.records() {
		var p struct{ Seq int }
		_ = json.Unmarshal(r.Value, &p)
		if seen[p.Seq] {
			continue
		}
		seen[p.Seq] = true
		if prev, ok := last[string(r.Key)]; ok && prev > p.Seq {
			t.Fatalf("key %s: %d after %d", r.Key, p.Seq, prev)
		}
		last[string(r.Key)] = p.Seq
	}
}

// published reads a relay's events_published_total for source src.
func published(t *testing.T, a *app.App, src string) float64 {
	t.Helper()
	return gathered(t, a, "outbox_relay_events_published_total", "source", src)
}

// gathered sums the app's metric name over the series whose label has
// value.
func gathered(t *testing.T, a *app.App, name, label, value string) float64 {
	t.Helper()
	mfs, err := a.Registry().Gather()
	if err != nil {
		t.Fatal(err)
	}
	var n float64
	for _, mf := range mfs {
		if mf.GetName() != name {
			continue
		}
		for _, m := range mf.GetMetric() {
			for _, l := range m.GetLabel() {
				if l.GetName() == label && l.GetValue() == value {
					n += m.GetCounter().GetValue() + m.GetGauge().GetValue()
				}
			}
		}
	}
	return n
}

// TestTakeoverEndsTheFrozenHoldersClaim guards the hand-over: a holder
// frozen with a claim open (its lease expired, its session alive) still
// locks the first row of a key; the new holder ends that claim before it
// claims anything, so the key's rows arrive in order. Without the ending,
// the new holder claims past the locked row and publishes the key's second
// row first (or never gets the first).
func TestTakeoverEndsTheFrozenHoldersClaim(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	dsn, pool := pgtest.NewDB(t)
	pgtest.Exec(t, pool, fixtures.Seed000)
	c := kafkaCluster(t, kfake.SeedTopics(1, "journey.created"))
	brokers := c.ListenAddrs()
	col := collect(t, brokers, "journey.created")
	cfg := baseConfig(dsn, brokers, config.Source{Name: "jm", Table: "journey_matcher.outbox", Preset: "published-flag", BatchSize: 20})
	cfg.LeaseTTL = config.Duration(time.Second)
	// The relay's schema, as the relay migrates it.
	m, err := app.Open(ctx, cfg, testLogger(t))
	if err != nil {
		t.Fatal(err)
	}
	if err := m.Migrate(ctx); err != nil {
		t.Fatal(err)
	}
	m.Close()
	for i := range 2 {
		pgtest.Exec(t, pool, fmt.Sprintf(`INSERT INTO journey_matcher.outbox (aggregate_id, aggregate_type, event_type, payload, correlation_id, created_at)
VALUES ('00000000-0000-0000-0000-000000000001', 'j', 'journey.created', '{"seq": %d}', gen_random_uuid(), clock_timestamp())`, i))
	}
	// The frozen holder: its lease, and its claim of the first row.
	frozen := pgtest.Pool(t, dsn, postgres.ApplicationName("frozen"))
	if l, err := postgres.NewLeases(frozen, "outbox_relay", "frozen").Acquire(ctx, "jm", time.Second); err != nil || l == nil {
		t.Fatalf("frozen holder's lease: %v %v", l, err)
	}
	tx, err := frozen.Begin(ctx)
	if err != nil {
		t.Fatal(err)
	}
	defer func() { _ = tx.Rollback(ctx) }()
	if _, err := tx.Exec(ctx, `SELECT 1 FROM journey_matcher.outbox WHERE payload->>'seq' = '0' FOR UPDATE`); err != nil {
		t.Fatal(err)
	}
	runApp(t, cfg)
	recs := col.waitDistinct(t, 2, 20*time.Second)
	var p struct{ Seq int }
	_ = json.Unmarshal(recs[0].Value, &p)
	if p.Seq != 0 {
		t.Fatalf("the key's second row arrived first")
	}
}

// TestReadinessTracksProgress: /readyz fails, naming the source and the
// threshold, while its oldest pending event is older than
// readiness.max_oldest_pending (a topic missing for a while), and passes
// again once the backlog drains.
func TestReadinessTracksProgress(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	dsn, pool := pgtest.NewDB(t)
	pgtest.Exec(t, pool, fixtures.Seed001)
	c := kafkaCluster(t)
	brokers := c.ListenAddrs()
	pgtest.Exec(t, pool, `INSERT INTO outbox (aggregate_type, aggregate_id, event_type, topic, payload)
VALUES ('Order', gen_random_uuid(), 'order.placed', 'late', '{}')`)
	cfg := baseConfig(dsn, brokers, config.Source{Name: "shop", Table: "public.outbox", Preset: "status",
		Backoff:   config.Backoff{Initial: config.Duration(100 * time.Millisecond), Max: config.Duration(200 * time.Millisecond)},
		Readiness: config.Readiness{MaxOldestPending: config.Duration(time.Second), MaxClaimFailure: config.Duration(30 * time.Second)}})
	cfg.Admin.Listen = "127.0.0.1:0"
	a, _ := runApp(t, cfg, app.WithStatsInterval(100*time.Millisecond))
	waitFor(t, 10*time.Second, "the admin server", func() (bool, string) { return a.AdminAddr() != "", "" })
	base := "http://" + a.AdminAddr()
	waitFor(t, 20*time.Second, "readyz to fail on the old backlog", func() (bool, string) {
		code, body := httpGet(t, base+"/readyz")
		return code == 503 && strings.Contains(body, `"source:shop"`) &&
			strings.Contains(body, "(readiness.max_oldest_pending 1s)"), body
	})
	cl, err := kgo.NewClient(kgo.SeedBrokers(brokers...))
	if err != nil {
		t.Fatal(err)
	}
	defer cl.Close()
	if _, err := kadm.NewClient(cl).CreateTopic(ctx, 1, 1, nil, "late"); err != nil {
		t.Fatal(err)
	}
	waitFor(t, 20*time.Second, "readyz to pass once the backlog drained", func() (bool, string) {
		code, body := httpGet(t, base+"/readyz")
		return code == 200, body
	})
}

// TestPendingFollowsEachBatch: the pending gauge shrinks with every batch
// committed, not only at the periodic count (an hour here).
func TestPendingFollowsEachBatch(t *testing.T) {
	t.Parallel()
	dsn, pool := pgtest.NewDB(t)
	pgtest.Exec(t, pool, fixtures.Seed001, `INSERT INTO outbox (aggregate_type, aggregate_id, event_type, topic, payload)
SELECT 'Order', gen_random_uuid(), 'order.placed', 'orders', '{}' FROM generate_series(1, 300)`)
	c := kafkaCluster(t, kfake.SeedTopics(1, "orders"))
	col := collect(t, c.ListenAddrs(), "orders")
	a, _ := runApp(t, baseConfig(dsn, c.ListenAddrs(), config.Source{Name: "shop", Table: "public.outbox", Preset: "status", BatchSize: 50}),
		app.WithStatsInterval(time.Hour))
	col.waitDistinct(t, 300, 30*time.Second)
	waitFor(t, 10*time.Second, "the pending gauge at zero", func() (bool, string) {
		v := gathered(t, a, "outbox_relay_pending_events", "source", "shop")
		return v == 0, fmt.Sprint(v, " pending")
	})
}
