package e2e

import (
	"context"
	"encoding/json"
	"fmt"
	"net/url"
	"slices"
	"testing"
	"time"

	"github.com/twmb/franz-go/pkg/kerr"
	"github.com/twmb/franz-go/pkg/kfake"
	"github.com/twmb/franz-go/pkg/kmsg"

	"github.com/outbox-relay/outbox-relay/internal/app"
	"github.com/outbox-relay/outbox-relay/internal/config"
	"github.com/outbox-relay/outbox-relay/internal/fixtures"
	"github.com/outbox-relay/outbox-relay/internal/pgtest"
)

// TestConsoleAPIFilters: the admin API's dead letters, read from
// PostgreSQL by a running relay, are selected by source, event type,
// reason (a substring, in any case) and age, newest first up to the limit;
// /api/sources carries each source's status and its sampled history.
func TestConsoleAPIFilters(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	dsn, pool := pgtest.NewDB(t)
	pgtest.Exec(t, pool, fixtures.Seed001)
	c := kafkaCluster(t, kfake.SeedTopics(1, "orders", "payments"))
	c.Fault(kfake.Fault{Keys: []kmsg.Key{kmsg.Produce}, Err: kerr.InvalidRecord, Count: -1})
	events := map[string]string{} // original event id -> event type
	for _, row := range [][2]string{{"order.placed", "orders"}, {"order.cancelled", "orders"}, {"payment.taken", "payments"}} {
		var id string
		if err := pool.QueryRow(ctx, `INSERT INTO outbox (aggregate_type, aggregate_id, event_type, topic, payload)
VALUES ('Order', gen_random_uuid(), $1, $2, '{}') RETURNING id::text`, row[0], row[1]).Scan(&id); err != nil {
			t.Fatal(err)
		}
		events[id] = row[0]
	}
	cfg := baseConfig(dsn, c.ListenAddrs(), config.Source{Name: "shop", Table: "public.outbox", Preset: "status"})
	cfg.Admin = config.Admin{Listen: "127.0.0.1:0"}
	a, _ := runApp(t, cfg, app.WithHistoryInterval(20*time.Millisecond))
	waitFor(t, 10*time.Second, "the admin server", func() (bool, string) { return a.AdminAddr() != "", "" })
	base := "http://" + a.AdminAddr()

	type deadLetter struct {
		ID              string    `json:"id"`
		Source          string    `json:"source"`
		OriginalEventID string    `json:"original_event_id"`
		EventType       string    `json:"event_type"`
		Reason          string    `json:"reason"`
		LastFailedAt    time.Time `json:"last_failed_at"`
	}
	list := func(q url.Values) []deadLetter {
		t.Helper()
		code, body := httpGet(t, base+"/api/dead-letters?"+q.Encode())
		var out []deadLetter
		if err := json.Unmarshal([]byte(body), &out); code != 200 || err != nil {
			t.Fatalf("GET /api/dead-letters?%s: %d %s", q.Encode(), code, body)
		}
		return out
	}
	types := func(ds []deadLetter) []string {
		var out []string
		for _, d := range ds {
			out = append(out, d.EventType)
		}
		slices.Sort(out)
		return out
	}
	waitFor(t, 20*time.Second, "three dead letters", func() (bool, string) {
		n := len(list(nil))
		return n == 3, fmt.Sprint(n)
	})
	// The first row failed two days ago: older than a day, and last in the
	// newest-first order though first in the table's.
	var placed string
	for id, typ := range events {
		if typ == "order.placed" {
			placed = id
		}
	}
	if _, err := pool.Exec(ctx, `UPDATE outbox_relay.failed_events SET created_at = now() - interval '2 days', first_failed_at = now() - interval '2 days',
  last_failed_at = now() - interval '2 days' WHERE original_event_id = $1`, placed); err != nil {
		t.Fatal(err)
	}

	for _, tc := range []struct {
		query url.Values
		want  []string
	}{
		{url.Values{"source": {"shop"}}, []string{"order.cancelled", "order.placed", "payment.taken"}},
		{url.Values{"source": {"billing"}}, nil},
		{url.Values{"event_type": {"order.placed"}}, []string{"order.placed"}},
		{url.Values{"reason": {`TOPIC "PAYMENTS"`}}, []string{"payment.taken"}},
		{url.Values{"reason": {"invalid_record"}, "event_type": {"order.cancelled"}}, []string{"order.cancelled"}},
		{url.Values{"reason": {"no such reason"}}, nil},
		{url.Values{"since": {"24h"}}, []string{"order.cancelled", "payment.taken"}},
		{url.Values{"since": {"72h"}, "source": {"shop"}}, []string{"order.cancelled", "order.placed", "payment.taken"}},
	} {
		if got := types(list(tc.query)); !slices.Equal(got, tc.want) {
			t.Errorf("?%s: %q, want %q", tc.query.Encode(), got, tc.want)
		}
	}
	all := list(nil)
	for i := 1; i < len(all); i++ {
		if all[i].LastFailedAt.After(all[i-1].LastFailedAt) {
			t.Errorf("not newest first: %v then %v", all[i-1].LastFailedAt, all[i].LastFailedAt)
		}
	}
	if len(all) != 3 || all[2].OriginalEventID != placed {
		t.Errorf("the oldest dead letter is not last: %+v", all)
	}
	if got := list(url.Values{"limit": {"2"}}); len(got) != 2 || got[0].ID != all[0].ID || got[1].ID != all[1].ID {
		t.Errorf("limit=2 gave %v, want the two newest of %v", got, all)
	}
	for _, d := range all {
		if d.Source != "shop" || events[d.OriginalEventID] != d.EventType || d.Reason == "" {
			t.Errorf("dead letter %+v does not match its row", d)
		}
	}

	var sources struct {
		Sources []struct {
			Source      string `json:"source"`
			DeadLetters int    `json:"dead_letters"`
		} `json:"sources"`
		History map[string][]struct {
			At      time.Time `json:"at"`
			Pending float64   `json:"pending"`
		} `json:"history"`
		Replicas []struct {
			Database string `json:"database"`
			Holds    int    `json:"holds"`
			Share    int    `json:"share"`
			Self     bool   `json:"self"`
		} `json:"replicas"`
	}
	waitFor(t, 20*time.Second, "the source's status and history", func() (bool, string) {
		code, body := httpGet(t, base+"/api/sources")
		if err := json.Unmarshal([]byte(body), &sources); code != 200 || err != nil {
			return false, body
		}
		return len(sources.Sources) == 1 && sources.Sources[0].Source == "shop" && sources.Sources[0].DeadLetters == 3 &&
			len(sources.History["shop"]) >= 2, body
	})
	// The one replica, this process, holds the source: its share.
	if r := sources.Replicas; len(r) != 1 || !r[0].Self || r[0].Holds != 1 || r[0].Share != 1 {
		t.Errorf("/api/sources replicas: %+v, want this process alone holding its share of 1", r)
	}

	// A second replica, standing by, serves the same charts: the samples
	// are read from the database, where the holder writes them.
	b, _ := runApp(t, cfg, app.WithHistoryInterval(20*time.Millisecond))
	waitFor(t, 10*time.Second, "the second replica's admin server", func() (bool, string) { return b.AdminAddr() != "", "" })
	waitFor(t, 20*time.Second, "the holder's samples and both replicas on the standby's console", func() (bool, string) {
		code, body := httpGet(t, "http://"+b.AdminAddr()+"/api/sources")
		if err := json.Unmarshal([]byte(body), &sources); code != 200 || err != nil {
			return false, body
		}
		return len(sources.History["shop"]) >= 2 && len(sources.Replicas) == 2, body
	})
}
