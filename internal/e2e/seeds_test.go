package e2e

import (
	"context"
	"encoding/json"
	"fmt"
	"reflect"
	"testing"
	"time"

	"github.com/twmb/franz-go/pkg/kfake"

	"github.com/outbox-relay/outbox-relay/internal/config"
	"github.com/outbox-relay/outbox-relay/internal/fixtures"
	"github.com/outbox-relay/outbox-relay/internal/pgtest"
)

func jsonEqual(t *testing.T, a, b []byte) bool {
	t.Helper()
	var x, y any
	if err := json.Unmarshal(a, &x); err != nil {
		t.Fatalf("payload %q: %v", a, err)
	}
	if err := json.Unmarshal(b, &y); err != nil {
		t.Fatalf("payload %q: %v", b, err)
	}
	return reflect.DeepEqual(x, y)
}

// Seed 000: two service schemas, discovered by pattern, outbox and
// outbox_events, published_at and processed_at.
func TestSeed000DiscoveredSchemas(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	dsn, pool := pgtest.NewDB(t)
	pgtest.Exec(t, pool, fixtures.Seed000)
	c := kafkaCluster(t, kfake.SeedTopics(3, "journey.created", "whatsapp.message.received"))
	brokers := c.ListenAddrs()

	type ev struct{ table, agg, typ, payload string }
	evs := []ev{
		{"journey_matcher.outbox", "11111111-1111-1111-1111-111111111111", "journey.created", `{"journey_id": "j1", "origin_crs": "KGX", "destination_crs": "EDI"}`},
		{"journey_matcher.outbox", "11111111-1111-1111-1111-111111111111", "journey.created", `{"journey_id": "j2", "name": "Café Müller"}`},
		{"whatsapp_handler.outbox_events", "22222222-2222-2222-2222-222222222222", "whatsapp.message.received", `{"from": "+44", "n": 1}`},
	}
	ids := make([]string, len(evs))
	for i, e := range evs {
		err := pool.QueryRow(ctx, fmt.Sprintf(`INSERT INTO %s (aggregate_id, aggregate_type, event_type, payload, correlation_id)
VALUES ($1, 'journey', $2, $3, gen_random_uuid()) RETURNING id::text`, e.table), e.agg, e.typ, e.payload).Scan(&ids[i])
		if err != nil {
			t.Fatal(err)
		}
	}
	col := collect(t, brokers, "journey.created", "whatsapp.message.received")
	stop := runRelay(t, baseConfig(dsn, brokers, config.Source{
		Name: "railrepay", Preset: "published-flag",
		Discover: &config.Discover{Schemas: "^(journey_matcher|whatsapp_handler)$", Interval: config.Duration(200 * time.Millisecond)},
	}))
	got := distinct(col.waitDistinct(t, len(evs), 30*time.Second))
	for i, e := range evs {
		r := got[ids[i]]
		if r == nil {
			t.Fatalf("event %s (%s) not received", ids[i], e.table)
		}
		if r.Topic != e.typ || string(r.Key) != e.agg || !jsonEqual(t, r.Value, []byte(e.payload)) {
			t.Errorf("event %d: topic %q key %q value %s", i, r.Topic, r.Key, r.Value)
		}
		if r.Partition != javaPartition([]byte(e.agg), 3) {
			t.Errorf("event %d: partition %d, want %d", i, r.Partition, javaPartition([]byte(e.agg), 3))
		}
		for k, want := range map[string]string{"event_type": e.typ, "aggregate_type": "journey", "aggregate_id": e.agg, "outbox_source": "railrepay:" + e.table} {
			if v, _ := header(r, k); v != want {
				t.Errorf("event %d: header %s = %q, want %q", i, k, v, want)
			}
		}
	}
	// Both published columns are set, each in its own table.
	waitFor(t, 10*time.Second, "rows marked published", func() (bool, string) {
		var n1, n2 int
		_ = pool.QueryRow(ctx, "SELECT count(*) FROM journey_matcher.outbox WHERE published AND published_at IS NOT NULL").Scan(&n1)
		_ = pool.QueryRow(ctx, "SELECT count(*) FROM whatsapp_handler.outbox_events WHERE published AND processed_at IS NOT NULL").Scan(&n2)
		return n1 == 2 && n2 == 1, fmt.Sprintf("journey_matcher %d/2, whatsapp_handler %d/1", n1, n2)
	})
	// A service schema that appears later is picked up by discovery.
	pgtest.Exec(t, pool, `CREATE SCHEMA not_matched; CREATE TABLE not_matched.outbox (LIKE journey_matcher.outbox INCLUDING ALL)`)
	pgtest.Exec(t, pool, `CREATE TABLE journey_matcher.outbox_events (LIKE whatsapp_handler.outbox_events INCLUDING ALL)`)
	var late string
	if err := pool.QueryRow(ctx, `INSERT INTO journey_matcher.outbox_events (aggregate_id, aggregate_type, event_type, payload, correlation_id)
VALUES (gen_random_uuid(), 'journey', 'journey.created', '{"late": true}', gen_random_uuid()) RETURNING id::text`).Scan(&late); err != nil {
		t.Fatal(err)
	}
	pgtest.Exec(t, pool, `INSERT INTO not_matched.outbox (aggregate_id, aggregate_type, event_type, payload, correlation_id)
VALUES (gen_random_uuid(), 'journey', 'journey.created', '{"ignored": true}', gen_random_uuid())`)
	waitFor(t, 20*time.Second, "the discovered table's event", func() (bool, string) {
		_, ok := distinct(col.records())[late]
		return ok, "not yet"
	})
	time.Sleep(300 * time.Millisecond)
	for _, r := range col.records() {
		if string(r.Value) == `{"ignored": true}` {
			t.Fatal("relayed a table whose schema does not match the discovery pattern")
		}
	}
	// Each discovered table is a source of its own in relay_state (the
	// counters are flushed when the relay stops).
	stop()
	var sources, published int
	_ = pool.QueryRow(ctx, "SELECT count(*), COALESCE(sum(total_events_published), 0) FROM outbox_relay.relay_state").Scan(&sources, &published)
	if sources != 3 || published != 4 {
		t.Fatalf("relay_state: %d sources, %d published; want 3 and 4", sources, published)
	}
}

// Seed 001: status column, topic column, partition_key falling back to the
// key, headers from a JSONB column.
func TestSeed001StatusHeadersPartitionKey(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	dsn, pool := pgtest.NewDB(t)
	pgtest.Exec(t, pool, fixtures.Seed001)
	c := kafkaCluster(t, kfake.SeedTopics(5, "users", "trades"))
	brokers := c.ListenAddrs()
	type ev struct {
		topic, agg, pkey, headers string
	}
	evs := []ev{
		{"users", "33333333-3333-3333-3333-333333333333", "", `{"traceId": "t-1", "source": "user-svc"}`},
		{"trades", "44444444-4444-4444-4444-444444444444", "BTC-USD", `{"traceId": "t-2", "attempt": 2}`},
		{"trades", "55555555-5555-5555-5555-555555555555", "BTC-USD", `{}`},
	}
	ids := make([]string, len(evs))
	for i, e := range evs {
		err := pool.QueryRow(ctx, `INSERT INTO outbox (aggregate_type, aggregate_id, event_type, topic, partition_key, payload, headers)
VALUES ('User', $1, 'user.registered', $2, NULLIF($3, ''), jsonb_build_object('i', $4::int), $5::jsonb) RETURNING id::text`,
			e.agg, e.topic, e.pkey, i, e.headers).Scan(&ids[i])
		if err != nil {
			t.Fatal(err)
		}
	}
	col := collect(t, brokers, "users", "trades")
	runRelay(t, baseConfig(dsn, brokers, config.Source{Name: "exchange", Table: "public.outbox", Preset: "status"}))
	got := distinct(col.waitDistinct(t, len(evs), 30*time.Second))
	for i, e := range evs {
		r := got[ids[i]]
		if r == nil {
			t.Fatalf("event %d not received", i)
		}
		pk := e.pkey
		if pk == "" {
			pk = e.agg
		}
		if r.Topic != e.topic || string(r.Key) != e.agg || r.Partition != javaPartition([]byte(pk), 5) {
			t.Errorf("event %d: topic %q key %q partition %d (want %s, %s, %d)", i, r.Topic, r.Key, r.Partition, e.topic, e.agg, javaPartition([]byte(pk), 5))
		}
		if !jsonEqual(t, r.Value, fmt.Appendf(nil, `{"i": %d}`, i)) {
			t.Errorf("event %d: value %s", i, r.Value)
		}
	}
	if v, _ := header(got[ids[0]], "traceId"); v != "t-1" {
		t.Errorf("header traceId = %q", v)
	}
	if v, _ := header(got[ids[0]], "source"); v != "user-svc" {
		t.Errorf("header source = %q", v)
	}
	if v, _ := header(got[ids[1]], "attempt"); v != "2" {
		t.Errorf("non-string header attempt = %q, want its JSON text 2", v)
	}
	waitFor(t, 10*time.Second, "rows published", func() (bool, string) {
		var n int
		_ = pool.QueryRow(ctx, "SELECT count(*) FROM outbox WHERE status = 'published' AND published_at IS NOT NULL").Scan(&n)
		return n == 3, fmt.Sprintf("%d/3", n)
	})
}

// Seed 002: Prisma's quoted camelCase table with an enum status column.
func TestSeed002PrismaCamelCaseEnum(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	dsn, pool := pgtest.NewDB(t)
	pgtest.Exec(t, pool, fixtures.Seed002)
	c := kafkaCluster(t, kfake.SeedTopics(2, "tenant.acme", "tenant.globex"))
	brokers := c.ListenAddrs()
	pgtest.Exec(t, pool, `INSERT INTO tenant."OutboxEvent" ("id", "tenantId", "eventType", "aggregateType", "aggregateId", "payload") VALUES
  ('ckx1', 'acme', 'kitchen.task.claimed', 'KitchenTask', 'task-123', '{"taskId": "task-123", "employeeId": "emp-456"}'),
  ('ckx2', 'globex', 'event.board.updated', 'BattleBoard', 'board-9', '{"boardId": "board-9", "status": "active"}')`)
	col := collect(t, brokers, "tenant.acme", "tenant.globex")
	runRelay(t, baseConfig(dsn, brokers, config.Source{Name: "kitchen", Table: `tenant."OutboxEvent"`, Preset: "prisma", Topic: "tenant.{tenantId}"}))
	got := distinct(col.waitDistinct(t, 2, 30*time.Second))
	r := got["ckx1"]
	if r == nil || r.Topic != "tenant.acme" || string(r.Key) != "task-123" || !jsonEqual(t, r.Value, []byte(`{"taskId": "task-123", "employeeId": "emp-456"}`)) {
		t.Fatalf("ckx1 arrived as %+v", r)
	}
	if v, _ := header(r, "event_type"); v != "kitchen.task.claimed" {
		t.Errorf("event_type header = %q", v)
	}
	if got["ckx2"] == nil || got["ckx2"].Topic != "tenant.globex" {
		t.Fatalf("ckx2 arrived as %+v", got["ckx2"])
	}
	waitFor(t, 10*time.Second, "rows published", func() (bool, string) {
		var n int
		_ = pool.QueryRow(ctx, `SELECT count(*) FROM tenant."OutboxEvent" WHERE "status" = 'published' AND "publishedAt" IS NOT NULL`).Scan(&n)
		return n == 2, fmt.Sprintf("%d/2", n)
	})
}
