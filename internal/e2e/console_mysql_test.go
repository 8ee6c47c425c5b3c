package e2e

import (
	"context"
	"encoding/json"
	"fmt"
	"io"
	"net/http"
	"net/url"
	"strings"
	"testing"
	"time"

	"github.com/twmb/franz-go/pkg/kfake"

	"github.com/outbox-relay/outbox-relay/internal/config"
	"github.com/outbox-relay/outbox-relay/internal/mytest"
)

// TestConsoleAPIOnMariaDB: the admin API over a MariaDB source lists its
// dead letters by reason, replays one (the row then arrives) and purges
// another, each audited under the X-Actor name; a wrong token changes
// nothing.
func TestConsoleAPIOnMariaDB(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	name, dsn := mytest.NewDatabase(t, "e2e_console")
	db := openMySQL(t, dsn)
	c := kafkaCluster(t, kfake.SeedTopics(1, "orders"))
	cfg := mysqlConfig(t, dsn, c.ListenAddrs(), config.Source{Name: "kafka-outbox", Table: name + ".kafka_outbox",
		Preset: "kafka-outbox"})
	cfg.Admin = config.Admin{Listen: "127.0.0.1:0", Token: "s3cret"}
	col := collect(t, c.ListenAddrs(), "orders")
	a, _ := runApp(t, cfg) // migrates: the table is the relay's to create
	waitFor(t, 10*time.Second, "the admin server", func() (bool, string) { return a.AdminAddr() != "", "" })
	base := "http://" + a.AdminAddr()
	insert := func(topic, payload string) string {
		t.Helper()
		res, err := db.ExecContext(ctx, "INSERT INTO kafka_outbox (topic, payload_json) VALUES (?, ?)", topic, payload)
		if err != nil {
			t.Fatal(err)
		}
		id, _ := res.LastInsertId()
		return fmt.Sprint(id)
	}
	badJSON := insert("orders", `{"order": `)
	noTopic := insert("", `{"order": 2}`)

	type deadLetter struct {
		ID              string `json:"id"`
		OriginalEventID string `json:"original_event_id"`
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
	waitFor(t, 30*time.Second, "two dead letters", func() (bool, string) {
		n := len(list(nil))
		return n == 2, fmt.Sprint(n)
	})
	byReason := func(reason string) deadLetter {
		t.Helper()
		got := list(url.Values{"reason": {reason}, "source": {"kafka-outbox"}})
		if len(got) != 1 {
			t.Fatalf("reason %q: %+v, want one dead letter", reason, got)
		}
		return got[0]
	}
	bad, missing := byReason("NOT VALID JSON"), byReason("missing topic")
	if bad.OriginalEventID != badJSON || missing.OriginalEventID != noTopic {
		t.Fatalf("by reason: %+v and %+v, want events %s and %s", bad, missing, badJSON, noTopic)
	}

	post := func(what, token, id string) (int, string) {
		t.Helper()
		req, _ := http.NewRequest("POST", base+"/api/dead-letters/"+what, strings.NewReader(`{"ids":["`+id+`"]}`))
		req.Header.Set("Authorization", "Bearer "+token)
		req.Header.Set("X-Actor", "bob")
		resp, err := http.DefaultClient.Do(req)
		if err != nil {
			t.Fatal(err)
		}
		defer resp.Body.Close()
		b, _ := io.ReadAll(resp.Body)
		return resp.StatusCode, string(b)
	}
	if code, body := post("purge", "wrong", missing.ID); code != http.StatusUnauthorized {
		t.Fatalf("purge with a wrong token: %d %s", code, body)
	}
	mytest.Exec(t, db, `UPDATE kafka_outbox SET payload_json = '{"order": 1}' WHERE id = `+badJSON)
	if code, body := post("replay", "s3cret", bad.ID); code != 200 || !strings.Contains(body, `"replayed":1`) {
		t.Fatalf("replay: %d %s", code, body)
	}
	col.waitDistinct(t, 1, 30*time.Second)
	if code, body := post("purge", "s3cret", missing.ID); code != 200 || !strings.Contains(body, `"purged":1`) {
		t.Fatalf("purge: %d %s", code, body)
	}
	if code, body := post("purge", "s3cret", missing.ID); code != http.StatusNotFound {
		t.Errorf("a second purge of the same dead letter: %d %s, want 404", code, body)
	}
	audit := func(action, id string) string {
		t.Helper()
		var actors []string
		rows, err := db.QueryContext(ctx, "SELECT actor FROM "+cfg.RelaySchema+".failed_event_audit WHERE action = ? AND CAST(failed_event_id AS CHAR) = ?", action, id)
		if err != nil {
			t.Fatal(err)
		}
		defer rows.Close()
		for rows.Next() {
			var a string
			_ = rows.Scan(&a)
			actors = append(actors, a)
		}
		return strings.Join(actors, ",")
	}
	if r, p := audit("replay", bad.ID), audit("purge", missing.ID); r != "console:bob" || p != "console:bob" {
		t.Errorf("audit: replay by %q, purge by %q, want console:bob once each", r, p)
	}
	if n := len(list(nil)); n != 0 {
		t.Errorf("%d dead letters left after a replay and a purge", n)
	}
}
