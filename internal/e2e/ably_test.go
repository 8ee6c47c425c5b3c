package e2e

import (
	"context"
	"encoding/base64"
	"encoding/json"
	"fmt"
	"io"
	"net/http"
	"net/http/httptest"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/outbox-relay/outbox-relay/internal/config"
	"github.com/outbox-relay/outbox-relay/internal/fixtures"
	"github.com/outbox-relay/outbox-relay/internal/pgtest"
	"github.com/outbox-relay/outbox-relay/internal/sink/webhook"
)

// ablyRecv is one publish the stand-in accepted.
type ablyRecv struct {
	Channel string
	ID      string          `json:"id"`
	Name    string          `json:"name"`
	Data    json.RawMessage `json:"data"`
}

// TestSeed002ToAbly relays seed 002's Prisma outbox to Ably's REST publish
// API (a local stand-in that checks the request): channel tenant:{tenantId},
// name = eventType, data = payload, id = the event id. A publish Ably refuses
// as invalid (400xx) ends the row failed with Ably's message in "error".
func TestSeed002ToAbly(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	dsn, pool := pgtest.NewDB(t)
	pgtest.Exec(t, pool, fixtures.Seed002)
	pgtest.Exec(t, pool, `INSERT INTO tenant."OutboxEvent" ("id", "tenantId", "eventType", "aggregateType", "aggregateId", "payload") VALUES
  ('ckx1', 'acme', 'kitchen.task.claimed', 'KitchenTask', 'task-123', '{"taskId": "task-123"}'),
  ('ckx2', 'globex', 'event.board.updated', 'BattleBoard', 'board-9', '{"boardId": "board-9"}'),
  ('ckx3', 'refused', 'kitchen.task.claimed', 'KitchenTask', 'task-7', '{"taskId": "task-7"}')`)

	const apiKey = "app.key:secret"
	var mu sync.Mutex
	var got []ablyRecv
	var problems []string
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		fail := func(format string, a ...any) {
			mu.Lock()
			problems = append(problems, fmt.Sprintf(format, a...))
			mu.Unlock()
			w.WriteHeader(http.StatusBadRequest)
		}
		channel, ok := strings.CutPrefix(r.URL.Path, "/channels/")
		channel, ok2 := strings.CutSuffix(channel, "/messages")
		switch {
		case r.Method != http.MethodPost || !ok || !ok2:
			fail("%s %s: want POST /channels/{channel}/messages", r.Method, r.URL.Path)
			return
		case r.Header.Get("Authorization") != "Basic "+base64.StdEncoding.EncodeToString([]byte(apiKey)):
			fail("authorization %q", r.Header.Get("Authorization"))
			return
		case !strings.HasPrefix(r.Header.Get("Content-Type"), "application/json"):
			fail("content type %q", r.Header.Get("Content-Type"))
			return
		}
		body, _ := io.ReadAll(r.Body)
		var m ablyRecv
		if err := json.Unmarshal(body, &m); err != nil {
			fail("body %q: %v", body, err)
			return
		}
		if channel == "tenant:refused" {
			w.Header().Set("Content-Type", "application/json")
			w.WriteHeader(http.StatusBadRequest)
			_, _ = io.WriteString(w, `{"error":{"code":40000,"statusCode":400,"message":"channel refused by the test"}}`)
			return
		}
		m.Channel = channel
		mu.Lock()
		got = append(got, m)
		mu.Unlock()
		w.WriteHeader(http.StatusCreated)
		_, _ = io.WriteString(w, `{"channel":"`+channel+`","messageId":"`+m.ID+`"}`)
	}))
	t.Cleanup(srv.Close)

	cfg := baseConfig(dsn, []string{"unused:9092"}, config.Source{
		Name: "kitchen", Table: `tenant."OutboxEvent"`, Preset: "prisma", Topic: "tenant:{tenantId}", Sink: "ably"})
	delete(cfg.Sinks, "kafka")
	cfg.Sinks["ably"] = config.Sink{Type: "webhook", Blocks: config.Blocks{"webhook": &webhook.Config{Preset: "ably",
		Ably: webhook.Ably{APIKey: apiKey, BaseURL: srv.URL}}}}
	cfg.ApplyDefaults()
	if err := cfg.Validate(); err != nil {
		t.Fatal(err)
	}
	runRelay(t, cfg)

	waitFor(t, 30*time.Second, "two publishes and one refusal", func() (bool, string) {
		var done int
		_ = pool.QueryRow(ctx, `SELECT count(*) FROM tenant."OutboxEvent" WHERE "status" <> 'pending'`).Scan(&done)
		return done == 3, fmt.Sprintf("%d/3 rows done", done)
	})
	mu.Lock()
	defer mu.Unlock()
	if len(problems) > 0 {
		t.Fatalf("requests not in Ably's shape: %v", problems)
	}
	byID := map[string]ablyRecv{}
	for _, m := range got {
		byID[m.ID] = m
	}
	want := map[string][2]string{"ckx1": {"tenant:acme", "kitchen.task.claimed"}, "ckx2": {"tenant:globex", "event.board.updated"}}
	for id, w := range want {
		m, ok := byID[id]
		if !ok || m.Channel != w[0] || m.Name != w[1] {
			t.Errorf("%s: got %+v, want channel %s name %s", id, m, w[0], w[1])
		}
	}
	if !jsonEqual(t, byID["ckx1"].Data, []byte(`{"taskId": "task-123"}`)) {
		t.Errorf("ckx1 data %s", byID["ckx1"].Data)
	}
	var status, reason string
	if err := pool.QueryRow(ctx, `SELECT "status"::text, coalesce("error", '') FROM tenant."OutboxEvent" WHERE "id" = 'ckx3'`).Scan(&status, &reason); err != nil {
		t.Fatal(err)
	}
	if status != "failed" || !strings.Contains(reason, "channel refused by the test") {
		t.Errorf("refused row: status %s, error %q; want failed with Ably's message", status, reason)
	}
}
