package e2e

import (
	"context"
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/twmb/franz-go/pkg/kadm"
	"github.com/twmb/franz-go/pkg/kfake"
	"github.com/twmb/franz-go/pkg/kgo"

	"github.com/outbox-relay/outbox-relay/internal/app"
	"github.com/outbox-relay/outbox-relay/internal/config"
	"github.com/outbox-relay/outbox-relay/internal/fixtures"
	"github.com/outbox-relay/outbox-relay/internal/layout"
	"github.com/outbox-relay/outbox-relay/internal/pgtest"
)

// appEventsDDL is a table whose layout is built from config alone: a text
// payload, a nullable topic column, a key.
const appEventsDDL = `CREATE SCHEMA app;
CREATE TABLE app.events (
  id BIGSERIAL PRIMARY KEY,
  topic TEXT,
  msg_key TEXT,
  body TEXT NOT NULL,
  kind TEXT NOT NULL DEFAULT 'thing.happened',
  created_at TIMESTAMPTZ NOT NULL DEFAULT clock_timestamp()
)`

// appEventsLayout is appEventsDDL's layout: delete on success.
var appEventsLayout = layout.Spec{
	ID: "id", Payload: "body", PayloadFormat: "json", Topic: "{topic}", Key: "{msg_key}",
	EventType: "kind", CreatedAt: "created_at", State: layout.State{Mode: "delete"},
}

// TestBadRowsDeadLettered: rows that can never be published (invalid JSON in
// a text payload column, a NULL topic, a payload over the sink's limit) land
// in failed_events with
// a readable reason, and the relay keeps relaying the good rows around them.
// The layout here is built from config alone: a text payload, a topic
// column, delete on success.
func TestBadRowsDeadLettered(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	dsn, pool := pgtest.NewDB(t)
	pgtest.Exec(t, pool, appEventsDDL)
	c := kafkaCluster(t, kfake.SeedTopics(2, "things"))
	brokers := c.ListenAddrs()
	rows := []struct {
		name, topic, body, reason string
	}{
		{"good1", "things", `{"ok": 1}`, ""},
		{"badjson", "things", `{"ok": 2`, "invalid payload: not valid JSON"},
		{"nulltopic", "", `{"ok": 3}`, "missing topic"},
		{"huge", "things", `{"pad": "` + strings.Repeat("x", 5000) + `"}`, "message too large"},
		{"good2", "things", `{"ok": 6}`, ""},
	}
	ids := map[string]string{}
	for _, r := range rows {
		var id string
		if err := pool.QueryRow(ctx, "INSERT INTO app.events (topic, msg_key, body) VALUES (NULLIF($1, ''), $2, $3) RETURNING id::text", r.topic, r.name, r.body).Scan(&id); err != nil {
			t.Fatal(err)
		}
		ids[r.name] = id
	}
	col := collect(t, brokers, "things")
	cfg := baseConfig(dsn, brokers, config.Source{
		Name: "app", Table: "app.events",
		Layout: appEventsLayout,
	})
	s := cfg.Sinks["kafka"]
	s.MaxMessageBytes = 4096
	cfg.Sinks["kafka"] = s
	runRelay(t, cfg)

	col.waitDistinct(t, 2, 30*time.Second)
	waitFor(t, 30*time.Second, "three dead letters", func() (bool, string) {
		var n int
		_ = pool.QueryRow(ctx, "SELECT count(*) FROM outbox_relay.failed_events").Scan(&n)
		return n == 3, fmt.Sprintf("%d/3", n)
	})
	for _, r := range rows {
		if r.reason == "" {
			continue
		}
		var reason string
		var isJSON, hasRaw bool
		var rowData string
		err := pool.QueryRow(ctx, `SELECT failure_reason, payload IS NOT NULL, payload_raw IS NOT NULL, row_data->>'msg_key'
FROM outbox_relay.failed_events WHERE original_event_id = $1`, ids[r.name]).Scan(&reason, &isJSON, &hasRaw, &rowData)
		if err != nil {
			t.Fatalf("%s: %v", r.name, err)
		}
		if !strings.Contains(reason, r.reason) {
			t.Errorf("%s: reason %q, want it to mention %q", r.name, reason, r.reason)
		}
		if r.name == "badjson" && (isJSON || !hasRaw) {
			t.Errorf("badjson: payload kept as json=%v raw=%v, want raw bytes", isJSON, hasRaw)
		}
		if rowData != r.name {
			t.Errorf("%s: row_data keeps msg_key %q", r.name, rowData)
		}
	}
	got := distinct(col.records())
	for _, name := range []string{"good1", "good2"} {
		if got[ids[name]] == nil {
			t.Errorf("%s not delivered", name)
		}
	}
	// Everything left the table (delivered or dead-lettered), and the relay
	// is still running: a new row goes through.
	var left int
	_ = pool.QueryRow(ctx, "SELECT count(*) FROM app.events").Scan(&left)
	if left != 0 {
		t.Errorf("%d rows left in the table", left)
	}
	var late string
	_ = pool.QueryRow(ctx, `INSERT INTO app.events (topic, msg_key, body) VALUES ('things', 'late', '{"late": true}') RETURNING id::text`).Scan(&late)
	waitFor(t, 10*time.Second, "a row written after the bad ones", func() (bool, string) {
		_, ok := distinct(col.records())[late]
		return ok, "not yet"
	})
}

// TestMissingTopicIsRetried: a topic that does not exist yet is an
// operations problem, not a poison message. Its row backs off (its key
// held, the other rows delivered meanwhile) and is delivered once the topic
// is created, with no dead letter.
func TestMissingTopicIsRetried(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	dsn, pool := pgtest.NewDB(t)
	pgtest.Exec(t, pool, fixtures.Seed001)
	c := kafkaCluster(t, kfake.SeedTopics(2, "orders"))
	brokers := c.ListenAddrs()
	insert := func(topic, key string, n int) string {
		var id string
		if err := pool.QueryRow(ctx, `INSERT INTO outbox (aggregate_type, aggregate_id, event_type, topic, payload, created_at)
VALUES ('Order', $1, 'order.placed', $2, jsonb_build_object('n', $3::int), clock_timestamp()) RETURNING id::text`, key, topic, n).Scan(&id); err != nil {
			t.Fatal(err)
		}
		return id
	}
	const held = "11111111-1111-1111-1111-111111111111"
	first := insert("invoices", held, 1) // the topic does not exist yet
	second := insert("orders", held, 2)  // same key: waits for the first
	other := insert("orders", "22222222-2222-2222-2222-222222222222", 3)
	col := collect(t, brokers, "orders", "invoices")
	cfg := baseConfig(dsn, brokers, config.Source{Name: "shop", Table: "public.outbox", Preset: "status", BatchSize: 10,
		Backoff: config.Backoff{Initial: config.Duration(200 * time.Millisecond), Max: config.Duration(500 * time.Millisecond)}})
	a, _ := runApp(t, cfg)
	waitFor(t, 30*time.Second, "the other key delivered and the missing topic's row retried", func() (bool, string) {
		retried := gathered(t, a, "outbox_relay_events_retried_total", "source", "shop")
		_, ok := distinct(col.records())[other]
		return ok && retried > 0, fmt.Sprintf("other delivered %v, %v retries", ok, retried)
	})
	var dead int
	_ = pool.QueryRow(ctx, "SELECT count(*) FROM outbox_relay.failed_events").Scan(&dead)
	if got := distinct(col.records()); dead != 0 || got[first] != nil || got[second] != nil {
		t.Fatalf("before the topic exists: %d dead letters, first row delivered %v, second %v", dead, got[first] != nil, got[second] != nil)
	}
	cl, err := kgo.NewClient(kgo.SeedBrokers(brokers...))
	if err != nil {
		t.Fatal(err)
	}
	defer cl.Close()
	adm := kadm.NewClient(cl)
	if _, err := adm.CreateTopic(ctx, 1, 1, nil, "invoices"); err != nil {
		t.Fatal(err)
	}
	col.waitDistinct(t, 3, 30*time.Second)
	// The two topics are read apart: the produce times tell the order.
	got := distinct(col.records())
	if t1, t2 := got[first].Timestamp, got[second].Timestamp; t2.Before(t1) {
		t.Fatalf("the held key's second row was produced at %v, before its first at %v", t2, t1)
	}
	_ = pool.QueryRow(ctx, "SELECT count(*) FROM outbox_relay.failed_events").Scan(&dead)
	if dead != 0 {
		t.Fatalf("%d dead letters for a topic that was only missing for a while", dead)
	}
}

// TestTemplateEmptyPartAndFallback: a template part whose column is empty
// or NULL makes the template missing (a topic "billing.{entity}" with an
// empty entity is a dead letter naming the column, never "billing."), and
// "{a|b}" falls back to b when a is NULL or empty.
func TestTemplateEmptyPartAndFallback(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	dsn, pool := pgtest.NewDB(t)
	pgtest.Exec(t, pool, `CREATE TABLE billing_events (id BIGSERIAL PRIMARY KEY, entity TEXT, aggregate_id TEXT NOT NULL,
  partition_key TEXT, payload JSONB NOT NULL)`)
	c := kafkaCluster(t, kfake.SeedTopics(1, "billing.invoice", "billing."))
	brokers := c.ListenAddrs()
	ids := map[string]string{}
	p1, p2 := "p1", "p2"
	for _, r := range []struct {
		name, entity string
		pk           *string // nil: NULL
	}{
		{"own-key", "invoice", &p1}, {"null-key", "invoice", nil}, {"empty-entity", "", &p2},
	} {
		var id string
		if err := pool.QueryRow(ctx, `INSERT INTO billing_events (entity, aggregate_id, partition_key, payload)
VALUES ($1, $2, $3, '{}') RETURNING id::text`, r.entity, "agg-"+r.name, r.pk).Scan(&id); err != nil {
			t.Fatal(err)
		}
		ids[r.name] = id
	}
	pgtest.Exec(t, pool, `INSERT INTO billing_events (entity, aggregate_id, partition_key, payload) VALUES ('invoice', 'agg-empty-key', '', '{}')`)
	col := collect(t, brokers, "billing.invoice", "billing.")
	runRelay(t, baseConfig(dsn, brokers, config.Source{Name: "billing", Table: "public.billing_events", Layout: layout.Spec{
		ID: "id", Payload: "payload", Topic: "billing.{entity}", Key: "{partition_key|aggregate_id}", State: layout.State{Mode: "delete"},
	}}))
	recs := col.waitDistinct(t, 3, 30*time.Second)
	keys := map[string]string{}
	for _, r := range recs {
		if r.Topic != "billing.invoice" {
			t.Errorf("a record went to topic %q", r.Topic)
		}
		keys[string(r.Key)] = r.Topic
	}
	for _, k := range []string{"p1", "agg-null-key", "agg-empty-key"} {
		if _, ok := keys[k]; !ok {
			t.Errorf("no record with key %q (have %v): the fallback did not apply", k, keys)
		}
	}
	var reason string
	waitFor(t, 20*time.Second, "the empty entity dead-lettered", func() (bool, string) {
		err := pool.QueryRow(ctx, "SELECT failure_reason FROM outbox_relay.failed_events WHERE original_event_id = $1", ids["empty-entity"]).Scan(&reason)
		return err == nil, fmt.Sprint(err)
	})
	if !strings.Contains(reason, `missing topic: the template "billing.{entity}" needs a value in entity, which is NULL or empty`) {
		t.Errorf("dead letter reason %q", reason)
	}
}

// TestExtraHeaders: columns become headers by configuration (seed 000's
// correlation_id, seed 002's tenant), absent when NULL or empty; a header
// the relay sets itself cannot be configured.
func TestExtraHeaders(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	dsn, pool := pgtest.NewDB(t)
	pgtest.Exec(t, pool, fixtures.Seed000,
		// so that a row can show what a NULL does
		"ALTER TABLE journey_matcher.outbox ALTER COLUMN correlation_id DROP NOT NULL")
	c := kafkaCluster(t, kfake.SeedTopics(1, "journey.created"))
	brokers := c.ListenAddrs()
	var withID, withoutID string
	if err := pool.QueryRow(ctx, `INSERT INTO journey_matcher.outbox (aggregate_id, aggregate_type, event_type, payload, correlation_id, created_at)
VALUES (gen_random_uuid(), 'journey', 'journey.created', '{}', '11111111-2222-3333-4444-555555555555', clock_timestamp()) RETURNING id::text`).Scan(&withID); err != nil {
		t.Fatal(err)
	}
	if err := pool.QueryRow(ctx, `INSERT INTO journey_matcher.outbox (aggregate_id, aggregate_type, event_type, payload, created_at)
VALUES (gen_random_uuid(), 'journey', 'journey.created', '{}', clock_timestamp()) RETURNING id::text`).Scan(&withoutID); err != nil {
		t.Fatal(err)
	}
	src := config.Source{Name: "jm", Table: "journey_matcher.outbox", Preset: "published-flag",
		Layout: layout.Spec{ExtraHeaders: map[string]string{"correlation_id": "{correlation_id}", "origin": "journeys/{aggregate_type}"}}}
	bad := src
	bad.Layout = layout.Spec{ExtraHeaders: map[string]string{"event_id": "{correlation_id}"}}
	a, err := app.Open(ctx, baseConfig(dsn, brokers, bad), testLogger(t))
	if err != nil {
		t.Fatal(err)
	}
	if _, err := a.Resolve(ctx); err == nil || !strings.Contains(err.Error(), "layout.extra_headers.event_id: the relay sets this header itself") {
		t.Errorf("a reserved header configured: %v", err)
	}
	a.Close()
	col := collect(t, brokers, "journey.created")
	runRelay(t, baseConfig(dsn, brokers, src))
	col.waitDistinct(t, 2, 20*time.Second)
	got := distinct(col.records())
	if v, ok := header(got[withID], "correlation_id"); !ok || v != "11111111-2222-3333-4444-555555555555" {
		t.Errorf("correlation_id header %q (%v)", v, ok)
	}
	if v, ok := header(got[withoutID], "correlation_id"); ok {
		t.Errorf("a NULL correlation_id became the header %q", v)
	}
	if v, _ := header(got[withoutID], "origin"); v != "journeys/journey" {
		t.Errorf("origin header %q", v)
	}
}

// TestPayloadSchema: a source's JSON Schema (seed 003's payment checks) is
// applied before sending: a payload it refuses is dead-lettered with the
// schema's reason and never sent; the others go.
func TestPayloadSchema(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	dsn, pool := pgtest.NewDB(t)
	pgtest.Exec(t, pool, fixtures.Seed001)
	schema := filepath.Join(t.TempDir(), "payment.json")
	if err := os.WriteFile(schema, []byte(`{"type": "object", "required": ["amount", "currency"],
  "properties": {"amount": {"type": "number", "exclusiveMinimum": 0}, "currency": {"type": "string", "pattern": "^[A-Z]{3}$"}}}`), 0o600); err != nil {
		t.Fatal(err)
	}
	ids := map[string]string{}
	for name, payload := range map[string]string{
		"good": `{"amount": 12.5, "currency": "EUR"}`, "zero": `{"amount": 0, "currency": "EUR"}`, "currency": `{"amount": 3, "currency": "euro"}`,
	} {
		var id string
		if err := pool.QueryRow(ctx, `INSERT INTO outbox (aggregate_type, aggregate_id, event_type, topic, payload)
VALUES ('Payment', gen_random_uuid(), 'payment.requested', 'payments', $1) RETURNING id::text`, payload).Scan(&id); err != nil {
			t.Fatal(err)
		}
		ids[name] = id
	}
	c := kafkaCluster(t, kfake.SeedTopics(1, "payments"))
	col := collect(t, c.ListenAddrs(), "payments")
	runRelay(t, baseConfig(dsn, c.ListenAddrs(), config.Source{Name: "pay", Table: "public.outbox", Preset: "status", Schema: schema}))
	waitFor(t, 20*time.Second, "two dead letters", func() (bool, string) {
		var n int
		_ = pool.QueryRow(ctx, "SELECT count(*) FROM outbox_relay.failed_events").Scan(&n)
		return n == 2, fmt.Sprint(n)
	})
	col.waitDistinct(t, 1, 10*time.Second)
	if got := distinct(col.records()); got[ids["good"]] == nil || len(got) != 1 {
		t.Errorf("delivered %d events, want only the good one", len(got))
	}
	for _, name := range []string{"zero", "currency"} {
		var reason string
		if err := pool.QueryRow(ctx, "SELECT failure_reason FROM outbox_relay.failed_events WHERE original_event_id = $1", ids[name]).Scan(&reason); err != nil {
			t.Fatal(err)
		}
		if !strings.Contains(reason, "payload refused by schema") || !strings.Contains(reason, "/"+map[string]string{"zero": "amount", "currency": "currency"}[name]) {
			t.Errorf("%s: reason %q", name, reason)
		}
	}
}
