package e2e

import (
	"context"
	"fmt"
	"strings"
	"testing"
	"time"

	"github.com/twmb/franz-go/pkg/kfake"

	"github.com/outbox-relay/outbox-relay/internal/config"
	"github.com/outbox-relay/outbox-relay/internal/pgtest"
)

// TestBadRowsDeadLettered: rows that can never be published (invalid JSON in
// a text payload column, a NULL topic, a payload over the sink's limit, a
// topic that does not exist with auto-create off) land in failed_events with
// a readable reason, and the relay keeps relaying the good rows around them.
// The layout here is built from config alone: a text payload, a topic
// column, delete on success.
func TestBadRowsDeadLettered(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	dsn, pool := pgtest.NewDB(t)
	pgtest.Exec(t, pool, `CREATE SCHEMA app;
CREATE TABLE app.events (
  id BIGSERIAL PRIMARY KEY,
  topic TEXT,
  msg_key TEXT,
  body TEXT NOT NULL,
  kind TEXT NOT NULL DEFAULT 'thing.happened',
  created_at TIMESTAMPTZ NOT NULL DEFAULT clock_timestamp()
)`)
	c := kafkaCluster(t, kfake.SeedTopics(2, "things"))
	brokers := c.ListenAddrs()
	rows := []struct {
		name, topic, body, reason string
	}{
		{"good1", "things", `{"ok": 1}`, ""},
		{"badjson", "things", `{"ok": 2`, "invalid payload: not valid JSON"},
		{"nulltopic", "", `{"ok": 3}`, "missing topic"},
		{"huge", "things", `{"pad": "` + strings.Repeat("x", 5000) + `"}`, "message too large"},
		{"unknowntopic", "no-such-topic", `{"ok": 5}`, "UNKNOWN_TOPIC_OR_PARTITION"},
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
		Layout: config.Layout{
			ID: "id", Payload: "body", PayloadFormat: "json", Topic: "{topic}", Key: "{msg_key}",
			EventType: "kind", CreatedAt: "created_at", State: config.State{Mode: "delete"},
		},
	})
	s := cfg.Sinks["kafka"]
	s.MaxMessageBytes = 4096
	cfg.Sinks["kafka"] = s
	runRelay(t, cfg)

	col.waitDistinct(t, 2, 30*time.Second)
	waitFor(t, 30*time.Second, "four dead letters", func() (bool, string) {
		var n int
		_ = pool.QueryRow(ctx, "SELECT count(*) FROM outbox_relay.failed_events").Scan(&n)
		return n == 4, fmt.Sprintf("%d/4", n)
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
