package e2e

import (
	"context"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/chromedp/cdproto/page"
	"github.com/chromedp/chromedp"
	"github.com/twmb/franz-go/pkg/kerr"
	"github.com/twmb/franz-go/pkg/kfake"
	"github.com/twmb/franz-go/pkg/kmsg"

	"github.com/outbox-relay/outbox-relay/internal/app"
	"github.com/outbox-relay/outbox-relay/internal/config"
	"github.com/outbox-relay/outbox-relay/internal/fixtures"
	"github.com/outbox-relay/outbox-relay/internal/pgtest"
)

// TestConsoleClickReplays drives the console in headless Chromium: it
// lists a dead letter; with the token typed in, a real click on its Replay
// button asks for a confirmation that names the event: declined, nothing
// changes; accepted, the dead letter is put back, the row arrives and one
// audit row names the console's caller. The token survives a reload. Then
// the filter by event type shows one of two new dead letters, and a
// confirmed click on its Purge button deletes that record alone, audited.
// A screenshot of the console is kept in the test's artifacts (go test
// -artifacts -outputdir DIR keeps it under DIR/_artifacts).
func TestConsoleClickReplays(t *testing.T) {
	t.Parallel()
	browser, err := exec.LookPath("chromium")
	if err != nil {
		if os.Getenv("OUTBOX_RELAY_CI") != "" {
			t.Fatal("chromium not found; .ci/run installs Debian's chromium")
		}
		t.Skip("chromium not found: install Debian's chromium package to run the console's browser test")
	}
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
	a, _ := runApp(t, cfg, app.WithHistoryInterval(50*time.Millisecond))
	waitFor(t, 10*time.Second, "the admin server", func() (bool, string) { return a.AdminAddr() != "", "" })
	waitFor(t, 20*time.Second, "the dead letter", func() (bool, string) {
		var n int
		_ = pool.QueryRow(ctx, "SELECT count(*) FROM outbox_relay.failed_events WHERE original_event_id = $1", id).Scan(&n)
		return n == 1, "not yet"
	})
	refuse.Remove()

	actx, cancel := chromedp.NewExecAllocator(ctx, append(chromedp.DefaultExecAllocatorOptions[:],
		chromedp.ExecPath(browser), chromedp.NoSandbox, chromedp.DisableGPU,
		chromedp.Flag("disable-quic", true), chromedp.Flag("disable-background-networking", true),
		chromedp.Flag("disable-component-update", true), chromedp.Flag("disable-sync", true),
		chromedp.UserDataDir(t.TempDir()))...)
	defer cancel()
	bctx, cancel := chromedp.NewContext(actx)
	defer cancel()
	bctx, cancel = context.WithTimeout(bctx, 60*time.Second)
	defer cancel()
	// The Replay button asks for a confirmation: each one is answered as
	// accept says, and its question kept.
	var accept atomic.Bool
	asked := make(chan string, 4)
	dialogs := chromedp.Events(bctx, page.JavascriptDialogOpening)
	go func() {
		for ev, err := range dialogs {
			if err != nil {
				return
			}
			asked <- ev.Message
			_, _ = chromedp.Call(bctx, page.HandleJavaScriptDialog, page.HandleJavaScriptDialogParams{Accept: accept.Load()})
		}
	}()
	question := func() string {
		t.Helper()
		select {
		case m := <-asked:
			return m
		case <-time.After(10 * time.Second):
			t.Fatal("the Replay button asked for no confirmation")
			return ""
		}
	}
	if err := chromedp.Do(bctx,
		chromedp.Navigate("http://"+a.AdminAddr()+"/"),
		chromedp.WaitVisible(`#sources tbody tr svg.chart polyline`),
		chromedp.WaitVisible(`#dead tbody tr button.replay`),
		chromedp.SendKeys(`#token`, "s3cret"),
	); err != nil {
		t.Fatalf("open the console: %v", err)
	}
	shot, err := chromedp.Run(bctx, chromedp.FullScreenshot(100))
	if err != nil {
		t.Fatalf("screenshot: %v", err)
	}
	// Declined, the confirmation leaves the dead letter as it is.
	if err := chromedp.Do(bctx, chromedp.Click(`#dead tbody tr button.replay`, chromedp.NodeVisible)); err != nil {
		t.Fatalf("click Replay: %v", err)
	}
	if q := question(); !strings.Contains(q, "Replay event "+id) {
		t.Errorf("the confirmation asks %q, want it to name event %s", q, id)
	}
	// Accepted, it replays.
	accept.Store(true)
	if err := chromedp.Do(bctx, chromedp.Click(`#dead tbody tr button.replay`, chromedp.NodeVisible)); err != nil {
		t.Fatalf("click Replay: %v", err)
	}
	question()
	msg, err := chromedp.Run(bctx, chromedp.Poll[string](`document.getElementById("msg").textContent`, chromedp.WithPollingTimeout(20*time.Second)))
	if err != nil {
		t.Fatalf("the console's answer: %v", err)
	}
	if err := os.WriteFile(filepath.Join(t.ArtifactDir(), "console.png"), shot, 0o644); err != nil {
		t.Fatal(err)
	}
	t.Logf("console screenshot: %s (%d bytes); message %q", filepath.Join(t.ArtifactDir(), "console.png"), len(shot), msg)
	if !strings.Contains(msg, "replayed 1") {
		t.Fatalf("after the click the console says %q", msg)
	}
	col.waitDistinct(t, 1, 10*time.Second)
	// The token stays for the tab's session: a reload keeps it.
	if err := chromedp.Do(bctx, chromedp.Reload(), chromedp.WaitVisible(`#sources tbody tr`)); err != nil {
		t.Fatalf("reload: %v", err)
	}
	if v, err := chromedp.Run(bctx, chromedp.Value(`#token`)); err != nil || v != "s3cret" {
		t.Errorf("the token after a reload: %q (%v), want it kept in sessionStorage", v, err)
	}
	// One audit row, the accepted replay's: the declined click did nothing.
	var actor string
	var audits, replays int
	if err := pool.QueryRow(ctx, `SELECT min(a.actor), count(*), min(f.replay_count) FROM outbox_relay.failed_event_audit a
JOIN outbox_relay.failed_events f ON f.id = a.failed_event_id WHERE f.original_event_id = $1 AND a.action = 'replay'`, id).Scan(&actor, &audits, &replays); err != nil ||
		!strings.HasPrefix(actor, "console:127.0.0.1:") || audits != 1 || replays != 1 {
		t.Errorf("audit actor %q, %d audit rows, %d replays (%v), want one by the console's caller", actor, audits, replays, err)
	}

	// Two more dead letters; the filter by event type shows one of them,
	// and its Purge button, confirmed, deletes its record alone.
	refuse = c.Fault(kfake.Fault{Keys: []kmsg.Key{kmsg.Produce}, Topic: "orders", Err: kerr.InvalidRecord, Count: -1})
	dead := map[string]string{} // event type -> dead letter id
	for _, typ := range []string{"order.cancelled", "order.shipped"} {
		var ev string
		if err := pool.QueryRow(ctx, `INSERT INTO outbox (aggregate_type, aggregate_id, event_type, topic, payload)
VALUES ('Order', gen_random_uuid(), $1, 'orders', '{}') RETURNING id::text`, typ).Scan(&ev); err != nil {
			t.Fatal(err)
		}
		waitFor(t, 20*time.Second, "the "+typ+" dead letter", func() (bool, string) {
			var dl string
			err := pool.QueryRow(ctx, "SELECT id::text FROM outbox_relay.failed_events WHERE original_event_id = $1", ev).Scan(&dl)
			dead[typ] = dl
			return err == nil, fmt.Sprint(err)
		})
	}
	refuse.Remove()
	purged := dead["order.cancelled"]
	if err := chromedp.Do(bctx,
		chromedp.SendKeys(`#filter input[name=event_type]`, "order.cancelled"),
		chromedp.Click(`#filter button`, chromedp.NodeVisible),
	); err != nil {
		t.Fatalf("filter: %v", err)
	}
	if _, err := chromedp.Run(bctx, chromedp.Poll[bool](`(() => { const rows = document.querySelectorAll("#dead tbody tr");
  return rows.length === 1 && rows[0].dataset.id === "`+purged+`"; })()`, chromedp.WithPollingTimeout(10*time.Second))); err != nil {
		t.Fatalf("the filter by event type never showed the order.cancelled dead letter alone: %v", err)
	}
	if err := chromedp.Do(bctx, chromedp.Click(`#dead tbody tr button.purge`, chromedp.NodeVisible)); err != nil {
		t.Fatalf("click Purge: %v", err)
	}
	if q := question(); !strings.Contains(q, "Purge") {
		t.Errorf("the purge's confirmation asks %q", q)
	}
	if msg, err := chromedp.Run(bctx, chromedp.Poll[string](`document.getElementById("msg").textContent`,
		chromedp.WithPollingTimeout(20*time.Second))); err != nil || !strings.Contains(msg, "purged 1") {
		t.Fatalf("after the Purge click the console says %q (%v)", msg, err)
	}
	var left, kept int
	_ = pool.QueryRow(ctx, "SELECT count(*) FILTER (WHERE id::text = $1), count(*) FILTER (WHERE id::text = $2) FROM outbox_relay.failed_events",
		purged, dead["order.shipped"]).Scan(&left, &kept)
	if err := pool.QueryRow(ctx, "SELECT actor FROM outbox_relay.failed_event_audit WHERE failed_event_id::text = $1 AND action = 'purge'",
		purged).Scan(&actor); err != nil || left != 0 || kept != 1 || !strings.HasPrefix(actor, "console:127.0.0.1:") {
		t.Errorf("after the purge: %d purged records left, %d others kept, audit actor %q (%v)", left, kept, actor, err)
	}
}
