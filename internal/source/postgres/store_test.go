package postgres_test

import (
	"context"
	"slices"
	"testing"
	"time"

	"github.com/jackc/pgx/v5/pgxpool"

	"github.com/outbox-relay/outbox-relay/internal/fixtures"
	"github.com/outbox-relay/outbox-relay/internal/layout"
	"github.com/outbox-relay/outbox-relay/internal/pgtest"
	"github.com/outbox-relay/outbox-relay/internal/source"
	"github.com/outbox-relay/outbox-relay/internal/source/postgres"
)

const relaySchema = "outbox_relay"

func migrated(t testing.TB) (string, *pgxpool.Pool) {
	t.Helper()
	dsn, pool := pgtest.NewDB(t)
	m, err := postgres.NewMigrator(dsn, relaySchema)
	if err != nil {
		t.Fatal(err)
	}
	defer m.Close()
	if err := m.Up(context.Background()); err != nil {
		t.Fatal(err)
	}
	return dsn, pool
}

func newStore(t testing.TB, pool *pgxpool.Pool, name string, tbl postgres.Table, preset string, over layout.Spec, ordering bool) (*postgres.Store, *layout.Layout) {
	t.Helper()
	l := resolveLayout(t, pool, tbl, preset, over)
	return postgres.New(pool, postgres.Options{Source: name, Table: tbl, RelaySchema: relaySchema, Layout: l, Ordering: ordering}), l
}

// resolveLayout is preset with over, resolved against tbl's columns.
func resolveLayout(t testing.TB, pool *pgxpool.Pool, tbl postgres.Table, preset string, over layout.Spec) *layout.Layout {
	t.Helper()
	merged, explicit, err := layout.Merge(preset, over, "")
	if err != nil {
		t.Fatal(err)
	}
	cols, err := postgres.Columns(context.Background(), pool, tbl)
	if err != nil {
		t.Fatal(err)
	}
	l, err := layout.Resolve(merged, explicit, tbl.String(), cols)
	if err != nil {
		t.Fatal(err)
	}
	return l
}

func TestMigrateUpDownUp(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	dsn, pool := pgtest.NewDB(t)
	for round := range 2 {
		m, err := postgres.NewMigrator(dsn, relaySchema)
		if err != nil {
			t.Fatal(err)
		}
		defer m.Close()
		if err := m.Up(ctx); err != nil {
			t.Fatalf("round %d up: %v", round, err)
		}
		var idx []string
		rows, _ := pool.Query(ctx, "SELECT indexname FROM pg_indexes WHERE schemaname = $1 ORDER BY 1", relaySchema)
		for rows.Next() {
			var s string
			_ = rows.Scan(&s)
			idx = append(idx, s)
		}
		for _, want := range []string{"idx_relay_state_last_poll", "idx_relay_state_schema", "idx_failed_events_source",
			"idx_failed_events_type", "idx_failed_events_first_failed", "idx_failed_events_payload"} {
			if !slices.Contains(idx, want) {
				t.Errorf("round %d: index %s missing (have %v)", round, want, idx)
			}
		}
		st, err := m.Status(ctx)
		if err != nil {
			t.Fatal(err)
		}
		for _, s := range st {
			if !s.Applied {
				t.Errorf("round %d: migration %d not applied after up", round, s.Version)
			}
		}
		// relay_state keeps one row per source.
		pgtest.Exec(t, pool, "INSERT INTO outbox_relay.relay_state (source, schema_name, table_name) VALUES ('a', 'journey_matcher', 'outbox')")
		if _, err := pool.Exec(ctx, "INSERT INTO outbox_relay.relay_state (source, schema_name, table_name) VALUES ('a', 'journey_matcher', 'outbox')"); err == nil {
			t.Errorf("round %d: duplicate relay_state source accepted", round)
		}
		if err := m.Down(ctx, true); err != nil {
			t.Fatalf("round %d down: %v", round, err)
		}
		var n int
		if err := pool.QueryRow(ctx, "SELECT count(*) FROM pg_namespace WHERE nspname = $1", relaySchema).Scan(&n); err != nil {
			t.Fatal(err)
		}
		if n != 0 {
			t.Fatalf("round %d: schema still there after down", round)
		}
	}
}

func TestMigrateDownOneStep(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	dsn, pool := migrated(t)
	m, err := postgres.NewMigrator(dsn, relaySchema)
	if err != nil {
		t.Fatal(err)
	}
	defer m.Close()
	if err := m.Down(ctx, false); err != nil {
		t.Fatal(err)
	}
	has := func(table, column string) bool {
		var ok bool
		if err := pool.QueryRow(ctx, `SELECT EXISTS (SELECT 1 FROM information_schema.columns
WHERE table_schema = 'outbox_relay' AND table_name = $1 AND column_name = $2)`, table, column).Scan(&ok); err != nil {
			t.Fatal(err)
		}
		return ok
	}
	if has("relay_state", "position_done") || !has("source_samples", "source") {
		t.Fatal("one step down did not undo exactly the newest migration (relay_state's position)")
	}
	st, _ := m.Status(ctx)
	if st[len(st)-1].Applied || !st[0].Applied {
		t.Fatalf("status after one step down: %+v", st)
	}
}

func insertJourneys(t *testing.T, pool *pgxpool.Pool, offset int, agg []string) []string {
	t.Helper()
	var ids []string
	for i, a := range agg {
		var id string
		err := pool.QueryRow(context.Background(), `INSERT INTO journey_matcher.outbox (aggregate_id, aggregate_type, event_type, payload, correlation_id, created_at)
VALUES ($1, 'journey', 'journey.created', jsonb_build_object('n', $2::int), gen_random_uuid(), now() + make_interval(secs => $2::int)) RETURNING id::text`, a, offset+i).Scan(&id)
		if err != nil {
			t.Fatal(err)
		}
		ids = append(ids, id)
	}
	return ids
}

func TestClaimSkipLockedAndComplete(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	_, pool := migrated(t)
	pgtest.Exec(t, pool, fixtures.Seed000)
	tbl := postgres.Table{Schema: "journey_matcher", Name: "outbox"}
	st, l := newStore(t, pool, "jm", tbl, "published-flag", layout.Spec{}, true)
	if l.PublishedAt != "published_at" || l.Flag != "published" {
		t.Fatalf("layout resolved to %+v", l)
	}
	a1, a2, a3 := "00000000-0000-0000-0000-000000000001", "00000000-0000-0000-0000-000000000002", "00000000-0000-0000-0000-000000000003"
	ids := insertJourneys(t, pool, 0, []string{a1, a2, a3, a1, a3})

	b1, err := st.Claim(ctx, 3)
	if err != nil || b1 == nil {
		t.Fatalf("claim: %v %v", b1, err)
	}
	got := ids4(b1.Rows())
	if !slices.Equal(got, ids[:3]) {
		t.Fatalf("first claim got %v, want %v", got, ids[:3])
	}
	r := b1.Rows()[0]
	if r.Topic != "journey.created" || string(r.Key) != a1 || r.OrderKey != a1 || r.EventType != "journey.created" || r.AggregateType != "journey" {
		t.Fatalf("row rendered as %+v", r)
	}
	// A second claimer skips the locked rows.
	b2, err := st.Claim(ctx, 10)
	if err != nil || b2 == nil {
		t.Fatalf("second claim: %v %v", b2, err)
	}
	if got := ids4(b2.Rows()); !slices.Equal(got, ids[3:]) {
		t.Fatalf("second claim got %v, want %v", got, ids[3:])
	}
	if err := b2.Release(ctx); err != nil {
		t.Fatal(err)
	}
	// Row 0 published, row 1 retried (key a2 backs off), row 2 dead.
	err = b1.Complete(ctx, source.Outcome{
		Published: []int{0},
		Retry:     []source.Retry{{Index: 1, Attempts: 1, At: time.Now().Add(time.Hour), Err: "broker down"}},
		Dead:      []source.Dead{{Index: 2, Attempts: 1, Reason: "message too large", PayloadIsJSON: true}},
	})
	if err != nil {
		t.Fatal(err)
	}
	var published bool
	var publishedAt *time.Time
	_ = pool.QueryRow(ctx, "SELECT published, published_at FROM journey_matcher.outbox WHERE id = $1", ids[0]).Scan(&published, &publishedAt)
	if !published || publishedAt == nil {
		t.Fatalf("row 0: published=%v at=%v", published, publishedAt)
	}
	_ = pool.QueryRow(ctx, "SELECT published, published_at FROM journey_matcher.outbox WHERE id = $1", ids[2]).Scan(&published, &publishedAt)
	if !published || publishedAt != nil {
		t.Fatalf("dead row 2: published=%v at=%v, want out of the pending set with no publish time", published, publishedAt)
	}
	var reason, evType string
	var payload []byte
	if err := pool.QueryRow(ctx, "SELECT failure_reason, event_type, payload::text FROM outbox_relay.failed_events WHERE original_event_id = $1", ids[2]).Scan(&reason, &evType, &payload); err != nil {
		t.Fatal(err)
	}
	if reason != "message too large" || evType != "journey.created" || string(payload) != `{"n": 2}` {
		t.Fatalf("failed_events row: %q %q %s", reason, evType, payload)
	}
	// Now due: rows 3 (key a1) and 4 (key a3); row 1 backs off.
	b3, err := st.Claim(ctx, 10)
	if err != nil || b3 == nil {
		t.Fatalf("third claim: %v %v", b3, err)
	}
	if got := ids4(b3.Rows()); !slices.Equal(got, []string{ids[3], ids[4]}) {
		t.Fatalf("third claim got %v, want rows 3 and 4", got)
	}
	_ = b3.Release(ctx)
	// Another row of key a2 waits behind the backing-off one.
	more := insertJourneys(t, pool, 10, []string{a2})
	b4, _ := st.Claim(ctx, 10)
	if b4 != nil {
		for _, r := range b4.Rows() {
			if r.ID == more[0] || r.ID == ids[1] {
				t.Fatalf("claimed %s while its key backs off", r.ID)
			}
		}
		_ = b4.Release(ctx)
	}
	// When the retry is due, the head comes first with its attempt count.
	pgtest.Exec(t, pool, "UPDATE outbox_relay.retry_state SET next_attempt_at = now() - interval '1 second'")
	b5, err := st.Claim(ctx, 10)
	if err != nil || b5 == nil {
		t.Fatalf("claim after backoff: %v %v", b5, err)
	}
	t.Cleanup(func() { _ = b5.Release(ctx) })
	rows := b5.Rows()
	pos := func(id string) int { return slices.IndexFunc(rows, func(r source.Row) bool { return r.ID == id }) }
	if pos(ids[1]) < 0 || pos(more[0]) < 0 || pos(ids[1]) > pos(more[0]) {
		t.Fatalf("after backoff got %v; want %s before %s", ids4(rows), ids[1], more[0])
	}
	if rows[pos(ids[1])].Attempts != 1 {
		t.Fatalf("attempts = %d, want 1", rows[pos(ids[1])].Attempts)
	}
	idx := []int{}
	for i := range rows {
		idx = append(idx, i)
	}
	if err := b5.Complete(ctx, source.Outcome{Published: idx}); err != nil {
		t.Fatal(err)
	}
	var n int
	_ = pool.QueryRow(ctx, "SELECT count(*) FROM outbox_relay.retry_state").Scan(&n)
	if n != 0 {
		t.Fatalf("retry_state keeps %d rows after the retried row was published", n)
	}
	// The dead letter counts; nothing is pending any more.
	g, err := st.RecordStats(ctx, source.Stats{Published: 5, DeadLettered: 1})
	if err != nil || g.Backlog.Pending != 0 || g.DeadLetters != 1 {
		t.Fatalf("gauges %+v %v", g, err)
	}
	var pub, dead int
	_ = pool.QueryRow(ctx, "SELECT total_events_published, total_events_dead_lettered FROM outbox_relay.relay_state WHERE source = 'jm'").Scan(&pub, &dead)
	if pub != 5 || dead != 1 {
		t.Fatalf("relay_state totals %d published, %d dead", pub, dead)
	}
}

func ids4(rows []source.Row) []string {
	var out []string
	for _, r := range rows {
		out = append(out, r.ID)
	}
	return out
}
