package e2e

import (
	"context"
	"encoding/json"
	"fmt"
	"net/http"
	"strings"
	"testing"
	"time"

	"github.com/twmb/franz-go/pkg/kerr"
	"github.com/twmb/franz-go/pkg/kfake"
	"github.com/twmb/franz-go/pkg/kmsg"

	"github.com/outbox-relay/outbox-relay/internal/app"
	"github.com/outbox-relay/outbox-relay/internal/config"
	"github.com/outbox-relay/outbox-relay/internal/fixtures"
	"github.com/outbox-relay/outbox-relay/internal/pgtest"
	"github.com/outbox-relay/outbox-relay/internal/source/postgres"
)

// replayWithStore replays dead letters through the source's store, as
// `outbox-relay dlq replay` does.
func replayWithStore(t *testing.T, ctx context.Context, dsn string, cfg *config.Config, evs []postgres.FailedEvent) {
	t.Helper()
	a, err := app.Open(ctx, cfg, testLogger(t))
	if err != nil {
		t.Fatal(err)
	}
	defer a.Close()
	srcs, err := a.Resolve(ctx)
	if err != nil {
		t.Fatal(err)
	}
	for _, s := range srcs {
		var mine []postgres.FailedEvent
		for _, e := range evs {
			if e.Source == s.Name {
				mine = append(mine, e)
			}
		}
		if len(mine) == 0 {
			continue
		}
		if n, err := s.Replay(ctx, mine, "test"); err != nil || n != len(mine) {
			t.Fatalf("replay: %d of %d: %v", n, len(mine), err)
		}
	}
}

// TestReplayWakesTheRelay: a replayed dead letter is relayed at once, not
// at the next poll (an update fires no insert trigger: the replay sends
// the wake-up itself). The relay polls every 30 s here; the row must
// arrive well before.
func TestReplayWakesTheRelay(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	dsn, pool := pgtest.NewDB(t)
	pgtest.Exec(t, pool, fixtures.Seed001)
	c := kafkaCluster(t, kfake.SeedTopics(1, "orders"))
	refuse := c.Fault(kfake.Fault{Keys: []kmsg.Key{kmsg.Produce}, Topic: "orders", Err: kerr.InvalidRecord, Count: -1})
	var id string
	if err := pool.QueryRow(ctx, `INSERT INTO outbox (aggregate_type, aggregate_id, event_type, topic, payload)
VALUES ('Order', gen_random_uuid(), 'order.placed', 'orders', '{}') RETURNING id::text`).Scan(&id); err != nil {
		t.Fatal(err)
	}
	cfg := baseConfig(dsn, c.ListenAddrs(), config.Source{Name: "shop", Table: "public.outbox", Preset: "status",
		Poll: config.Poll{Min: config.Duration(30 * time.Second), Max: config.Duration(30 * time.Second)}})
	col := collect(t, c.ListenAddrs(), "orders")
	runRelay(t, cfg)
	var evs []postgres.FailedEvent
	waitFor(t, 20*time.Second, "the row dead-lettered", func() (bool, string) {
		var err error
		evs, err = postgres.ListFailed(ctx, pool, "outbox_relay", postgres.DLQFilter{})
		return err == nil && len(evs) == 1, fmt.Sprint(len(evs), err)
	})
	refuse.Remove()
	start := time.Now()
	replayWithStore(t, ctx, dsn, cfg, evs)
	col.waitDistinct(t, 1, 10*time.Second)
	t.Logf("replayed row delivered %v after the replay (poll interval 30s)", time.Since(start).Round(time.Millisecond))
}

// TestConsoleReplay: the admin API lists a dead letter and, given the
// bearer token, replays it; the row then arrives and the audit names the
// console's caller. Without the token nothing changes.
func TestConsoleReplay(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	dsn, pool := pgtest.NewDB(t)
	pgtest.Exec(t, pool, fixtures.Seed001)
	c := kafkaCluster(t, kfake.SeedTopics(1, "orders"))
	refuse := c.Fault(kfake.Fault{Keys: []kmsg.Key{kmsg.Produce}, Topic: "orders", Err: kerr.InvalidRecord, Count: -1})
	var id string
	if err := pool.QueryRow(ctx, `INSERT INTO outbox (aggregate_type, aggregate_id, event_type, topic, payload)
VALUES ('Order', gen_random_uuid(), 'order.placed', 'orders', '{}') RETURNING id::text`).Scan(&id); err != nil {
		t.Fatal(err)
	}
	cfg := baseConfig(dsn, c.ListenAddrs(), config.Source{Name: "shop", Table: "public.outbox", Preset: "status"})
	cfg.Admin = config.Admin{Listen: "127.0.0.1:0", Token: "s3cret"}
	col := collect(t, c.ListenAddrs(), "orders")
	a, _ := runApp(t, cfg)
	waitFor(t, 10*time.Second, "the admin server", func() (bool, string) { return a.AdminAddr() != "", "" })
	base := "http://" + a.AdminAddr()
	var dead []struct {
		ID, Source, Reason string
		OriginalEventID    string `json:"original_event_id"`
	}
	waitFor(t, 20*time.Second, "the dead letter in the API", func() (bool, string) {
		code, body := httpGet(t, base+"/api/dead-letters?source=shop&reason=invalid")
		dead = nil
		_ = json.Unmarshal([]byte(body), &dead)
		return code == 200 && len(dead) == 1 && dead[0].OriginalEventID == id, body
	})
	refuse.Remove()
	post := func(token string) int {
		req, _ := http.NewRequest("POST", base+"/api/dead-letters/replay", strings.NewReader(`{"ids":["`+dead[0].ID+`"]}`))
		if token != "" {
			req.Header.Set("Authorization", "Bearer "+token)
		}
		req.Header.Set("X-Actor", "alice")
		resp, err := http.DefaultClient.Do(req)
		if err != nil {
			t.Fatal(err)
		}
		defer resp.Body.Close()
		return resp.StatusCode
	}
	if code := post("wrong"); code != http.StatusUnauthorized {
		t.Fatalf("replay with a wrong token: %d", code)
	}
	if code := post("s3cret"); code != http.StatusOK {
		t.Fatalf("replay with the token: %d", code)
	}
	col.waitDistinct(t, 1, 10*time.Second)
	var actor string
	if err := pool.QueryRow(ctx, "SELECT actor FROM outbox_relay.failed_event_audit WHERE failed_event_id = $1", dead[0].ID).Scan(&actor); err != nil || actor != "console:alice" {
		t.Errorf("audit actor %q (%v), want console:alice", actor, err)
	}
	// A purge deletes a dead letter's record, audited; the row stays dead.
	refuse = c.Fault(kfake.Fault{Keys: []kmsg.Key{kmsg.Produce}, Topic: "orders", Err: kerr.InvalidRecord, Count: -1})
	var second string
	if err := pool.QueryRow(ctx, `INSERT INTO outbox (aggregate_type, aggregate_id, event_type, topic, payload)
VALUES ('Order', gen_random_uuid(), 'order.placed', 'orders', '{}') RETURNING id::text`).Scan(&second); err != nil {
		t.Fatal(err)
	}
	var deadID string
	waitFor(t, 20*time.Second, "the second dead letter", func() (bool, string) {
		err := pool.QueryRow(ctx, "SELECT id::text FROM outbox_relay.failed_events WHERE original_event_id = $1", second).Scan(&deadID)
		return err == nil, fmt.Sprint(err)
	})
	req, _ := http.NewRequest("POST", base+"/api/dead-letters/purge", strings.NewReader(`{"ids":["`+deadID+`"]}`))
	req.Header.Set("Authorization", "Bearer s3cret")
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	resp.Body.Close()
	var left int
	_ = pool.QueryRow(ctx, "SELECT count(*) FROM outbox_relay.failed_events WHERE id = $1", deadID).Scan(&left)
	if err := pool.QueryRow(ctx, "SELECT actor FROM outbox_relay.failed_event_audit WHERE failed_event_id = $1 AND action = 'purge'", deadID).Scan(&actor); resp.StatusCode != 200 || left != 0 || err != nil {
		t.Errorf("purge: status %d, %d records left, audit %q (%v)", resp.StatusCode, left, actor, err)
	}
	var status string
	_ = pool.QueryRow(ctx, "SELECT status FROM outbox WHERE id = $1", second).Scan(&status)
	if status != "failed" {
		t.Errorf("the purged dead letter's row is %q, want it left failed", status)
	}
	if code, body := httpGet(t, base+"/"); code != 200 || !strings.Contains(body, "Dead letters") {
		t.Errorf("GET / (the console): %d", code)
	}
}
