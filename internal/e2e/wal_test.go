package e2e

import (
	"context"
	"encoding/json"
	"fmt"
	"strings"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgxpool"
	"github.com/twmb/franz-go/pkg/kadm"
	"github.com/twmb/franz-go/pkg/kfake"
	"github.com/twmb/franz-go/pkg/kgo"

	"github.com/outbox-relay/outbox-relay/internal/config"
	"github.com/outbox-relay/outbox-relay/internal/fixtures"
	"github.com/outbox-relay/outbox-relay/internal/pgtest"
	"github.com/outbox-relay/outbox-relay/internal/source/postgres"
)

// TestWALSeed001: seed 001's outbox, verbatim, relayed with capture wal.
// A few events wait in the table before the relay starts (read in the
// slot's snapshot); then 200 transactions, each of one key, write three
// single-row INSERTs and one three-row INSERT. Every key's events arrive in
// the order they were written (the rows of one INSERT share created_at and
// their statement, which only the write-ahead log orders), every row is
// marked published, and the slot confirms up to the end of the WAL.
func TestWALSeed001(t *testing.T) {
	t.Parallel()
	const txs, keys = 200, 16
	ctx := context.Background()
	dsn, pool := pgtest.NewDB(t)
	pgtest.Exec(t, pool, fixtures.Seed001)
	slot := walSlot(pool, "orders")
	t.Cleanup(func() { dropSlot(t, pool, slot) })
	seq := map[string]int{}
	row := func(key string) string {
		seq[key]++
		return fmt.Sprintf(`('order', '00000000-0000-0000-0000-%012d', 'order.created', 'orders', '%s', '{"k": "%s", "s": %d}')`,
			len(key), key, key, seq[key])
	}
	const insert = `INSERT INTO outbox (aggregate_type, aggregate_id, event_type, topic, partition_key, payload) VALUES `
	for k := range keys {
		key := fmt.Sprintf("key-%02d", k)
		pgtest.Exec(t, pool, insert+row(key))
	}

	c := kafkaCluster(t, kfake.SeedTopics(4, "orders"))
	col := collect(t, c.ListenAddrs(), "orders")
	runRelay(t, baseConfig(dsn, c.ListenAddrs(), config.Source{Name: "orders", Table: "public.outbox", Preset: "status",
		Capture: config.CaptureWAL, BatchSize: 100, Pipeline: 2}))
	walStreaming(t, pool, "orders")
	for i := range txs {
		key := fmt.Sprintf("key-%02d", i%keys)
		err := pgx.BeginFunc(ctx, pool, func(tx pgx.Tx) error {
			for range 3 {
				if _, err := tx.Exec(ctx, insert+row(key)); err != nil {
					return err
				}
			}
			_, err := tx.Exec(ctx, insert+strings.Join([]string{row(key), row(key), row(key)}, ", "))
			return err
		})
		if err != nil {
			t.Fatal(err)
		}
	}
	var end string
	if err := pool.QueryRow(ctx, `SELECT pg_current_wal_lsn()::text`).Scan(&end); err != nil {
		t.Fatal(err)
	}
	total := keys + txs*6
	recs := col.waitDistinct(t, total, 90*time.Second)

	last := map[string]int{}
	seen := map[string]bool{}
	for _, r := range recs {
		var p struct {
			K string
			S int
		}
		if err := json.Unmarshal(r.Value, &p); err != nil {
			t.Fatalf("payload %s: %v", r.Value, err)
		}
		id := fmt.Sprintf("%s/%d", p.K, p.S)
		if seen[id] {
			continue
		}
		seen[id] = true
		if p.S != last[p.K]+1 {
			t.Errorf("key %s: event %d arrived after event %d", p.K, p.S, last[p.K])
		}
		last[p.K] = p.S
	}
	waitFor(t, 30*time.Second, "every row marked published", func() (bool, string) {
		var n int
		err := pool.QueryRow(ctx, `SELECT count(*) FROM outbox WHERE status <> 'published' OR published_at IS NULL`).Scan(&n)
		return err == nil && n == 0, fmt.Sprintf("%d not published (%v)", n, err)
	})
	waitFor(t, 30*time.Second, "the slot confirms the end of the inserts", func() (bool, string) {
		var ok bool
		var at string
		err := pool.QueryRow(ctx, `SELECT confirmed_flush_lsn >= $2::pg_lsn, confirmed_flush_lsn::text FROM pg_replication_slots WHERE slot_name = $1`,
			slot, end).Scan(&ok, &at)
		return err == nil && ok, fmt.Sprintf("at %s, want %s (%v)", at, end, err)
	})
}

// walStreaming waits until the source's slot is streamed (its walsender
// streams: the slot's snapshot was read, and a row inserted from now on
// comes from the stream).
func walStreaming(t *testing.T, pool *pgxpool.Pool, src string) string {
	t.Helper()
	slot := walSlot(pool, src)
	waitFor(t, 30*time.Second, "the relay streams its slot", func() (bool, string) {
		var state string
		err := pool.QueryRow(context.Background(), `SELECT r.state FROM pg_replication_slots s
JOIN pg_stat_replication r ON r.pid = s.active_pid WHERE s.slot_name = $1`, slot).Scan(&state)
		return err == nil && state == "streaming", fmt.Sprint(state, err)
	})
	return slot
}

// TestWALBadRowsAndRetries: rows that come from the stream and can never be
// published (invalid JSON in a text payload, a NULL topic) are
// dead-lettered with their reason, as polling does, and deleted (the layout
// deletes); a row whose topic does not exist yet backs off, its key held
// (the key's next row waits), and both are delivered once the topic
// exists; the other rows flow around them.
func TestWALBadRowsAndRetries(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	dsn, pool := pgtest.NewDB(t)
	pgtest.Exec(t, pool, appEventsDDL)
	c := kafkaCluster(t, kfake.SeedTopics(2, "things"))
	brokers := c.ListenAddrs()
	col := collect(t, brokers, "things", "later")
	cfg := baseConfig(dsn, brokers, config.Source{
		Name: "app", Table: "app.events", Capture: config.CaptureWAL,
		Layout:  appEventsLayout,
		Backoff: config.Backoff{Initial: config.Duration(200 * time.Millisecond), Max: config.Duration(500 * time.Millisecond)},
	})
	t.Cleanup(func() { dropSlot(t, pool, walSlot(pool, "app")) }) // after the relay stops
	a, _ := runApp(t, cfg)
	walStreaming(t, pool, "app")
	rows := []struct{ name, topic, key, body, reason string }{
		{"good1", "things", "a", `{"ok": 1}`, ""},
		{"badjson", "things", "b", `{"ok": 2`, "invalid payload: not valid JSON"},
		{"nulltopic", "", "c", `{"ok": 3}`, "missing topic"},
		{"first", "later", "held", `{"ok": 4}`, ""},
		{"second", "things", "held", `{"ok": 5}`, ""},
		{"good2", "things", "d", `{"ok": 6}`, ""},
	}
	ids := map[string]string{}
	for _, r := range rows {
		var id string
		if err := pool.QueryRow(ctx, "INSERT INTO app.events (topic, msg_key, body) VALUES (NULLIF($1, ''), $2, $3) RETURNING id::text", r.topic, r.key, r.body).Scan(&id); err != nil {
			t.Fatal(err)
		}
		ids[r.name] = id
	}
	waitFor(t, 30*time.Second, "the good rows delivered, two dead letters, the missing topic's row retried", func() (bool, string) {
		var dead int
		_ = pool.QueryRow(ctx, "SELECT count(*) FROM outbox_relay.failed_events").Scan(&dead)
		got := distinct(col.records())
		retried := gathered(t, a, "outbox_relay_events_retried_total", "source", "app")
		return got[ids["good1"]] != nil && got[ids["good2"]] != nil && dead == 2 && retried > 0,
			fmt.Sprintf("%d delivered, %d dead letters, %v retries", len(got), dead, retried)
	})
	if got := distinct(col.records()); got[ids["first"]] != nil || got[ids["second"]] != nil {
		t.Fatalf("the held key's rows went before the topic exists: first %v, second %v", got[ids["first"]] != nil, got[ids["second"]] != nil)
	}
	var attempts int
	if err := pool.QueryRow(ctx, `SELECT attempts FROM outbox_relay.retry_state WHERE source = 'app' AND event_id = $1`, ids["first"]).Scan(&attempts); err != nil || attempts < 1 {
		t.Fatalf("the retried row's retry state: %d attempts (%v)", attempts, err)
	}
	for _, r := range rows {
		if r.reason == "" {
			continue
		}
		var reason, rowData string
		err := pool.QueryRow(ctx, `SELECT failure_reason, row_data->>'msg_key' FROM outbox_relay.failed_events WHERE original_event_id = $1`,
			ids[r.name]).Scan(&reason, &rowData)
		if err != nil {
			t.Fatalf("%s: %v", r.name, err)
		}
		if !strings.Contains(reason, r.reason) || rowData != r.key {
			t.Errorf("%s: reason %q, row_data's msg_key %q; want %q and %q", r.name, reason, rowData, r.reason, r.key)
		}
	}
	cl, err := kgo.NewClient(kgo.SeedBrokers(brokers...))
	if err != nil {
		t.Fatal(err)
	}
	defer cl.Close()
	if _, err := kadm.NewClient(cl).CreateTopic(ctx, 1, 1, nil, "later"); err != nil {
		t.Fatal(err)
	}
	col.waitDistinct(t, 4, 30*time.Second)
	got := distinct(col.records())
	if t1, t2 := got[ids["first"]].Timestamp, got[ids["second"]].Timestamp; t2.Before(t1) {
		t.Fatalf("the held key's second row was produced at %v, before its first at %v", t2, t1)
	}
	waitFor(t, 30*time.Second, "every row left the table", func() (bool, string) {
		var left int
		_ = pool.QueryRow(ctx, "SELECT count(*) FROM app.events").Scan(&left)
		return left == 0, fmt.Sprintf("%d left", left)
	})
}

// walSlot is the replication slot of source src of pool's database.
func walSlot(pool *pgxpool.Pool, src string) string {
	return postgres.WALSlotName(pool.Config().ConnConfig.Database, config.DefaultRelaySchema, src)
}

// dropSlot drops a replication slot, ending the session that streams it.
func dropSlot(t *testing.T, pool *pgxpool.Pool, slot string) {
	ctx := context.Background()
	_, _ = pool.Exec(ctx, `SELECT pg_terminate_backend(active_pid, 5000) FROM pg_replication_slots WHERE slot_name = $1 AND active_pid IS NOT NULL`, slot)
	if _, err := pool.Exec(ctx, `SELECT pg_drop_replication_slot(slot_name) FROM pg_replication_slots WHERE slot_name = $1`, slot); err != nil {
		t.Errorf("drop slot %s: %v", slot, err)
	}
}

// TestWALCheckCommand: check says what a source read by capture wal needs
// and how its slot stands, and nothing of a wake-up trigger it does not use.
func TestWALCheckCommand(t *testing.T) {
	t.Parallel()
	dsn, pool := pgtest.NewDB(t)
	pgtest.Exec(t, pool, fixtures.Seed001)
	c := kafkaCluster(t, kfake.SeedTopics(1, "orders"))
	cfg := writeYAML(t, fmt.Sprintf(`databases:
  main: {dsn: %q}
sinks:
  kafka: {type: kafka, brokers: [%q]}
sources:
  - name: orders
    table: public.outbox
    preset: status
    capture: wal
`, dsn, c.ListenAddrs()[0]))
	out, err := runCLI(t, "--config", cfg, "check")
	want := "source orders: capture wal: slot " + walSlot(pool, "orders") + ": not made yet; run makes it, with publication outbox_relay_orders"
	if !strings.Contains(out, want) || strings.Contains(out, "wake-up trigger") || strings.Contains(out, "order: WARNING") {
		t.Fatalf("check (%v):\n%s\nwant %q, and no word of a trigger nor an order gap", err, out, want)
	}
}

// walChaos is the chaos scenario of relay processes (see procChaos) with
// capture wal, its slot dropped once they have stopped.
func walChaos(t *testing.T) *procChaos {
	t.Helper()
	p := newProcChaosOpts(t, procOpts{leaseTTL: "1s", keys: 50, capture: "wal"})
	t.Cleanup(func() { dropSlot(t, p.pool, walSlot(p.pool, "chaos")) })
	return p
}

// TestWALKillAtEveryStep: capture wal through crashes. The relay (a child
// process) is killed with SIGKILL while it publishes and at random moments
// while a producer writes, and restarted each time: it resumes from its
// slot; nothing is lost, order holds on first delivery, duplicates stay
// within what was in flight.
func TestWALKillAtEveryStep(t *testing.T) {
	t.Parallel()
	kills := 6
	if chaosFull() {
		kills = 30
	}
	p := walChaos(t)
	procs := killAtSteps(t, p, kills, []string{"publish", "random"})
	rep := p.finish(procs)
	bound := kills * 3 * 50 // pipeline x batch per kill
	t.Logf("%d kills: %s (duplicate bound %d)", kills, rep, bound)
	if !rep.OK() || rep.Duplicates > bound {
		t.Error(rep)
	}
}

// TestWALFrozenHolder: capture wal through a fenced hand-over. Two relays;
// the holder is frozen (SIGSTOP) past its lease, while its walsender still
// holds the slot; the other takes the source over, ends that stream and
// streams the slot itself; the frozen one resumes, completes nothing and
// streams nothing more. Nothing is lost, order holds on first delivery,
// duplicates stay within what was in flight.
func TestWALFrozenHolder(t *testing.T) {
	t.Parallel()
	freezes := 3
	if chaosFull() {
		freezes = 12
	}
	p := walChaos(t)
	rep := p.finish(freezeHolders(t, p, freezes))
	// Per freeze: what the deposed holder had in flight (sent again by
	// the new holder, and by itself once resumed), and a second of the
	// producer's rows (about 300), delivered but not yet written or handed
	// out before the resumed holder's stream checks its lease.
	bound := freezes * (2*3*50 + 300)
	t.Logf("%d freezes: %s (duplicate bound %d)", freezes, rep, bound)
	if !rep.OK() || rep.Duplicates > bound {
		t.Error(rep)
	}
}
