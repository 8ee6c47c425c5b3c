package e2e

import (
	"context"
	"encoding/json"
	"fmt"
	"log/slog"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/twmb/franz-go/pkg/kadm"
	"github.com/twmb/franz-go/pkg/kfake"
	"github.com/twmb/franz-go/pkg/kgo"

	"github.com/outbox-relay/outbox-relay/internal/app"
	"github.com/outbox-relay/outbox-relay/internal/config"
	"github.com/outbox-relay/outbox-relay/internal/pgtest"
)

// sample reads one sample of a Prometheus text exposition: the line of
// name carrying every label given.
func sample(body, name string, labels ...string) (float64, bool) {
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
		return v, err == nil
	}
	return 0, false
}

// exactlyOnceYAML is a configuration relaying chaosTable with delivery
// exactly_once, its admin server on a free port.
func exactlyOnceYAML(t *testing.T, dsn string, brokers []string, autoCreate bool) (path string, cfg *config.Config) {
	t.Helper()
	path = writeYAML(t, fmt.Sprintf(`admin: {listen: "127.0.0.1:0"}
shutdown: {timeout: 5s}
lease_ttl: 3s
databases:
  main: {dsn: %q}
sinks:
  kafka: {type: kafka, brokers: [%q], auto_create_topics: %t}
sources:
  - name: orders
    table: public.outbox
    delivery: exactly_once
    notify: "off"
    batch_size: 100
    poll: {min: 10ms, max: 100ms}
    readiness: {max_claim_failure: 1s}
    layout: {id: id, payload: payload, topic: "{topic}", key: "{k}", created_at: created_at, order_by: id,
             state: {mode: flag, flag: published, published_at: [published_at]}}
`, dsn, strings.Join(brokers, ","), autoCreate))
	cfg, err := config.Load(path)
	if err != nil {
		t.Fatal(err)
	}
	return path, cfg
}

// statusOf runs `status --json` and returns the source's status, and the
// command's error (a stuck source fails it).
func statusOf(t *testing.T, cfgPath, name string) (app.SourceStatus, string, error) {
	t.Helper()
	out, err := runCLI(t, "--config", cfgPath, "status", "--json")
	var st []app.SourceStatus
	if jerr := json.Unmarshal([]byte(out[:strings.LastIndex(out, "]")+1]), &st); jerr != nil {
		return app.SourceStatus{}, out, fmt.Errorf("status --json: %v: %s", jerr, out)
	}
	for _, s := range st {
		if s.Source == name {
			return s, out, err
		}
	}
	return app.SourceStatus{}, out, fmt.Errorf("status lacks %s: %s", name, out)
}

// TestExactlyOnceMissingProgressTopicIsToldEverywhere: with delivery
// exactly_once and no progress topic, check fails naming the source and
// the topic; once run starts, status says the source is starting (exit 0)
// with the holder's live backlog, not the previous process's record; once
// its grace is over, readiness, the console's API and the gauges say it is
// stuck because the progress topic is missing, with the backlog counted
// now. Once the topic exists, it relays and every one of them says so.
func TestExactlyOnceMissingProgressTopicIsToldEverywhere(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	dsn, pool := pgtest.NewDB(t)
	pgtest.Exec(t, pool, chaosTable)
	c := kafkaCluster(t, kfake.SeedTopics(1, "orders"))
	brokers := c.ListenAddrs()
	path, cfg := exactlyOnceYAML(t, dsn, brokers, false)

	// A previous process relayed the source and recorded an empty backlog.
	mig, err := app.Open(ctx, cfg, testLogger(t))
	if err != nil {
		t.Fatal(err)
	}
	if err := mig.Migrate(ctx); err != nil {
		t.Fatal(err)
	}
	mig.Close()
	pgtest.Exec(t, pool, `INSERT INTO outbox_relay.relay_state (source, schema_name, table_name, owner, pending_events,
  last_claim_at, sink_states, updated_at) VALUES ('orders', 'public', 'outbox', 'gone/1/0001', 0, now() - interval '10 minutes',
  '{"kafka": "ok"}', now() - interval '10 minutes')`)
	fillOrders(t, pool, 5)

	out, err := runCLI(t, "--config", path, "check")
	if err == nil {
		t.Errorf("check passed without the progress topic:\n%s", out)
	}
	for _, want := range []string{"source orders: sinks.kafka: exactly-once progress topic outbox_relay_progress: MISSING",
		"--create --topic outbox_relay_progress", "cleanup.policy=compact", "auto_create_topics"} {
		if !strings.Contains(out, want) {
			t.Errorf("check output lacks %q:\n%s", want, out)
		}
	}

	a, _ := runApp(t, cfg, app.WithStatsInterval(100*time.Millisecond))
	waitFor(t, 10*time.Second, "the admin server", func() (bool, string) { return a.AdminAddr() != "", "" })
	base := "http://" + a.AdminAddr()

	// status, from the holder's own record: starting, the takeover's
	// cause named, the backlog counted by the holder.
	waitFor(t, 20*time.Second, "status to read the holder's record", func() (bool, string) {
		s, out, err := statusOf(t, path, "orders")
		return s.Held && s.RecordedBy == s.Owner && s.Pending == 5 && !s.PendingStale &&
			strings.HasPrefix(s.Sinks["kafka"], "exactly-once takeover failing") && err == nil, fmt.Sprintf("%v %s", err, out)
	})
	s, out, err := statusOf(t, path, "orders")
	if s.State != app.StateStarting || s.Cause != app.CauseTopicMissing || s.Stuck != "" || err != nil {
		t.Errorf("status within the grace: state %q cause %q stuck %q, err %v (want starting, topic_missing, exit 0):\n%s",
			s.State, s.Cause, s.Stuck, err, out)
	}
	text, _ := runCLI(t, "--config", path, "status")
	if !strings.Contains(text, "starting: ") || !strings.Contains(text, "UNKNOWN_TOPIC_OR_PARTITION") {
		t.Errorf("status table within the grace:\n%s", text)
	}

	// This process's own view, once the grace (max_claim_failure 1s) is over.
	waitFor(t, 20*time.Second, "readiness to fail on the missing topic", func() (bool, string) {
		code, body := httpGet(t, base+"/readyz")
		return code == 503 && strings.Contains(body, "source:orders") && strings.Contains(body, "stuck (topic_missing)") &&
			strings.Contains(body, "outbox_relay_progress"), fmt.Sprint(code, body)
	})
	_, metrics := httpGet(t, base+"/metrics")
	for _, m := range []struct {
		name   string
		labels []string
		want   float64
	}{
		{"outbox_relay_source_relaying", []string{`source="orders"`}, 0},
		{"outbox_relay_source_state", []string{`source="orders"`, `state="stuck"`, `cause="topic_missing"`}, 1},
		{"outbox_relay_pending_events", []string{`source="orders"`}, 5},
	} {
		if v, ok := sample(metrics, m.name, m.labels...); !ok || v != m.want {
			t.Errorf("%s%v = %v (found %t), want %v", m.name, m.labels, v, ok, m.want)
		}
	}
	code, body := httpGet(t, base+"/api/sources")
	var api struct{ Sources []app.SourceStatus }
	if err := json.Unmarshal([]byte(body), &api); err != nil || code != 200 || len(api.Sources) != 1 {
		t.Fatalf("/api/sources: %d %v %s", code, err, body)
	}
	if s := api.Sources[0]; s.State != app.StateStuck || s.Cause != app.CauseTopicMissing || !strings.Contains(s.Stuck, "outbox_relay_progress") ||
		s.Pending != 5 || !s.PendingLive {
		t.Errorf("the console's source: %+v", s)
	}

	// The topic is created: the takeover succeeds and the source relays.
	adm := kadm.NewClient(kgoClient(t, brokers))
	if _, err := adm.CreateTopic(ctx, 1, 1, map[string]*string{"cleanup.policy": new("compact")}, "outbox_relay_progress"); err != nil {
		t.Fatal(err)
	}
	waitFor(t, 30*time.Second, "the source relayed and said so", func() (bool, string) {
		code, body := httpGet(t, base+"/readyz")
		_, metrics := httpGet(t, base+"/metrics")
		v, _ := sample(metrics, "outbox_relay_source_relaying", `source="orders"`)
		p, _ := sample(metrics, "outbox_relay_pending_events", `source="orders"`)
		var marked int
		_ = pool.QueryRow(ctx, "SELECT count(*) FROM outbox WHERE published").Scan(&marked)
		return code == 200 && v == 1 && p == 0 && marked == 5, fmt.Sprint(code, body, v, p, marked)
	})
	waitFor(t, 20*time.Second, "status to say it relays", func() (bool, string) {
		s, out, err := statusOf(t, path, "orders")
		return s.State == app.StateRelaying && s.Cause == "" && s.Pending == 0 && err == nil, fmt.Sprint(err, out)
	})
}

// TestExactlyOnceProgressTopicAutoCreated: with auto_create_topics on,
// check says the missing progress topic will be created, and the relay
// (against a broker that creates topics on request, as Kafka does with
// auto.create.topics.enable) delivers with the topic created on the way.
func TestExactlyOnceProgressTopicAutoCreated(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	dsn, pool := pgtest.NewDB(t)
	pgtest.Exec(t, pool, chaosTable)
	c := kafkaClusterFor(t, true, kfake.SeedTopics(1, "orders"))
	path, cfg := exactlyOnceYAML(t, dsn, c.ListenAddrs(), true)
	fillOrders(t, pool, 5)
	out, err := runCLI(t, "--config", path, "check")
	want := "exactly-once progress topic outbox_relay_progress does not exist yet; run has it created when the source starts (auto_create_topics)"
	if !strings.Contains(out, want) {
		t.Errorf("check output lacks %q (err %v):\n%s", want, err, out)
	}
	runApp(t, cfg, app.WithStatsInterval(100*time.Millisecond))
	waitFor(t, 30*time.Second, "every row delivered", func() (bool, string) {
		var marked int
		_ = pool.QueryRow(ctx, "SELECT count(*) FROM outbox WHERE published").Scan(&marked)
		return marked == 5, fmt.Sprint(marked, " of 5")
	})
	topics, err := kadm.NewClient(kgoClient(t, c.ListenAddrs())).ListTopics(ctx, "outbox_relay_progress")
	if err != nil || !topics.Has("outbox_relay_progress") {
		t.Errorf("progress topic not created: %v %v", topics, err)
	}
}

// TestRetriedRowLogsAtInfo: a row that keeps failing (its topic does not
// exist) is logged at info level with its source and reason, without
// waiting for a warning or a dead letter.
func TestRetriedRowLogsAtInfo(t *testing.T) {
	t.Parallel()
	dsn, pool := pgtest.NewDB(t)
	pgtest.Exec(t, pool, chaosTable)
	c := kafkaCluster(t)
	src := chaosSource(10, 1)
	src.Name, src.MaxAttempts = "retrying", 1000
	src.Backoff = config.Backoff{Initial: config.Duration(10 * time.Millisecond), Max: config.Duration(50 * time.Millisecond)}
	cfg := baseConfig(dsn, c.ListenAddrs(), src)
	buf := &syncBuffer{}
	log := slog.New(slog.NewTextHandler(buf, &slog.HandlerOptions{Level: slog.LevelInfo}))
	runAppLogged(t, cfg, log, app.WithKafkaOptions(kgo.UnknownTopicRetries(1)))
	pgtest.Exec(t, pool, `INSERT INTO outbox (k, topic, payload) VALUES ('a', 'nowhere', '{}')`)
	waitFor(t, 30*time.Second, "the retried row logged at info level", func() (bool, string) {
		for _, line := range strings.Split(buf.String(), "\n") {
			if strings.Contains(line, "level=INFO") && strings.Contains(line, `msg="event failed; retrying"`) &&
				strings.Contains(line, "source=retrying") && strings.Contains(line, "UNKNOWN_TOPIC_OR_PARTITION") {
				return true, ""
			}
		}
		return false, buf.String()
	})
}

// kgoClient is a client of brokers closed with the test.
func kgoClient(t *testing.T, brokers []string) *kgo.Client {
	t.Helper()
	cl, err := kgo.NewClient(kgo.SeedBrokers(brokers...))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(cl.Close)
	return cl
}
