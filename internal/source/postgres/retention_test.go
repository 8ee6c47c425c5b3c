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

const week = 7 * 24 * time.Hour

// retentionTable is one outbox shape for the retention tests.
type retentionTable struct {
	preset string
	over   layout.Spec
	ddl    func(t *testing.T, dsn string, pool *pgxpool.Pool)
	table  postgres.Table
	insert string // inserts one row ($1 an int) and returns its id as text
	// created and published are the columns that date a row.
	created, published string
}

var retentionTables = []retentionTable{
	{
		preset: "published-flag", table: postgres.Table{Schema: "journey_matcher", Name: "outbox"},
		ddl: func(t *testing.T, _ string, pool *pgxpool.Pool) { pgtest.Exec(t, pool, fixtures.Seed000) },
		insert: `INSERT INTO journey_matcher.outbox (aggregate_id, aggregate_type, event_type, payload, correlation_id)
VALUES (gen_random_uuid(), 'journey', 'journey.created', jsonb_build_object('n', $1::int), gen_random_uuid()) RETURNING id::text`,
		created: "created_at", published: "published_at",
	},
	{
		preset: "published-flag", table: postgres.Table{Schema: "whatsapp_handler", Name: "outbox_events"},
		ddl: func(t *testing.T, _ string, pool *pgxpool.Pool) { pgtest.Exec(t, pool, fixtures.Seed000) },
		insert: `INSERT INTO whatsapp_handler.outbox_events (aggregate_id, aggregate_type, event_type, payload, correlation_id)
VALUES (gen_random_uuid(), 'chat', 'chat.opened', jsonb_build_object('n', $1::int), gen_random_uuid()) RETURNING id::text`,
		created: "created_at", published: "processed_at",
	},
	{
		preset: "status", table: postgres.Table{Schema: "public", Name: "outbox"},
		ddl: func(t *testing.T, _ string, pool *pgxpool.Pool) { pgtest.Exec(t, pool, fixtures.Seed001) },
		insert: `INSERT INTO public.outbox (aggregate_type, aggregate_id, event_type, topic, payload)
VALUES ('order', gen_random_uuid(), 'order.created', 'orders', jsonb_build_object('n', $1::int)) RETURNING id::text`,
		created: "created_at", published: "published_at",
	},
	{
		preset: "prisma", table: postgres.Table{Schema: "tenant", Name: "OutboxEvent"},
		ddl: func(t *testing.T, _ string, pool *pgxpool.Pool) { pgtest.Exec(t, pool, fixtures.Seed002) },
		insert: `INSERT INTO tenant."OutboxEvent" (id, "tenantId", "eventType", "aggregateType", "aggregateId", payload)
VALUES ('ev' || $1::int || '-' || md5(random()::text), 't1', 'order.created', 'order', 'a' || $1::int, '{}') RETURNING id`,
		created: "createdAt", published: "publishedAt",
	},
	{
		preset: "kafka-outbox", table: postgres.Table{Schema: "app", Name: "kafka_outbox"},
		ddl: func(t *testing.T, dsn string, pool *pgxpool.Pool) {
			pgtest.Exec(t, pool, "CREATE SCHEMA app")
			if err := postgres.MigrateTable(context.Background(), dsn, postgres.Table{Schema: "app", Name: "kafka_outbox"}); err != nil {
				t.Fatal(err)
			}
		},
		insert:  `INSERT INTO app.kafka_outbox (topic, payload_json, key) VALUES ('orders', jsonb_build_object('n', $1::int)::text, 'k' || $1::int) RETURNING id::text`,
		created: "created_at", published: "push_completed_at",
	},
	{
		// A published timestamp and nothing else: a dead letter sets it
		// too, and only failed_events tells it from a delivered row.
		over: layout.Spec{ID: "id", Payload: "payload", Topic: "{topic}", CreatedAt: "created_at",
			State: layout.State{Mode: "timestamp", PublishedAt: []string{"sent_at"}}},
		table: postgres.Table{Schema: "public", Name: "events"},
		ddl: func(t *testing.T, _ string, pool *pgxpool.Pool) {
			pgtest.Exec(t, pool, `CREATE TABLE public.events (id bigserial PRIMARY KEY, topic text NOT NULL, payload jsonb NOT NULL,
  created_at timestamptz NOT NULL DEFAULT now(), sent_at timestamptz)`)
		},
		insert:  `INSERT INTO public.events (topic, payload) VALUES ('orders', jsonb_build_object('n', $1::int)) RETURNING id::text`,
		created: "created_at", published: "sent_at",
	},
}

func (rt retentionTable) name() string {
	if rt.preset == "" {
		return "custom-" + rt.over.State.Mode
	}
	return rt.preset + "/" + rt.table.Name
}

// fill inserts n rows and returns their ids.
func (rt retentionTable) fill(t *testing.T, pool *pgxpool.Pool, n int) []string {
	t.Helper()
	ids := make([]string, n)
	for i := range ids {
		if err := pool.QueryRow(context.Background(), rt.insert, i).Scan(&ids[i]); err != nil {
			t.Fatal(err)
		}
	}
	return ids
}

// settle claims every pending row and records the outcome the relay
// records: the rows in published are delivered, those in dead
// dead-lettered, those in retry back off; the rest stay pending.
func settle(t *testing.T, st *postgres.Store, published, dead, retry []string) {
	t.Helper()
	ctx := context.Background()
	b, err := st.Claim(ctx, 1000)
	if err != nil || b == nil {
		t.Fatalf("claim: %v %v", b, err)
	}
	var o source.Outcome
	for i, r := range b.Rows() {
		switch {
		case slices.Contains(published, r.ID):
			o.Published = append(o.Published, i)
		case slices.Contains(dead, r.ID):
			o.Dead = append(o.Dead, source.Dead{Index: i, Attempts: 1, Reason: "rejected", PayloadIsJSON: true})
		case slices.Contains(retry, r.ID):
			o.Retry = append(o.Retry, source.Retry{Index: i, Attempts: 1, At: time.Now().Add(time.Hour), Err: "broker down"})
		}
	}
	if got := len(o.Published) + len(o.Dead) + len(o.Retry); got != len(published)+len(dead)+len(retry) {
		t.Fatalf("claimed %d of the rows to settle, want %d", got, len(published)+len(dead)+len(retry))
	}
	if err := b.Complete(ctx, o); err != nil {
		t.Fatal(err)
	}
}

// age moves the given rows' dates back by d.
func (rt retentionTable) age(t *testing.T, pool *pgxpool.Pool, d time.Duration, ids ...string) {
	t.Helper()
	c, p := postgres.QuoteIdent(rt.created), postgres.QuoteIdent(rt.published)
	_, err := pool.Exec(context.Background(), "UPDATE "+rt.table.String()+" SET "+c+" = "+c+" - make_interval(secs => $1), "+
		p+" = "+p+" - make_interval(secs => $1) WHERE id::text = ANY($2)", d.Seconds(), ids)
	if err != nil {
		t.Fatal(err)
	}
}

// remaining lists the ids left in the table, sorted.
func (rt retentionTable) remaining(t *testing.T, pool *pgxpool.Pool) []string {
	t.Helper()
	rows, err := pool.Query(context.Background(), "SELECT id::text FROM "+rt.table.String()+" ORDER BY 1")
	if err != nil {
		t.Fatal(err)
	}
	var ids []string
	for rows.Next() {
		var id string
		if err := rows.Scan(&id); err != nil {
			t.Fatal(err)
		}
		ids = append(ids, id)
	}
	if err := rows.Err(); err != nil {
		t.Fatal(err)
	}
	return ids
}

func sorted(ids ...string) []string {
	out := slices.Clone(ids)
	slices.Sort(out)
	return out
}

func purgeParams(st *layout.Layout, rt retentionTable) postgres.PurgeParams {
	return postgres.PurgeParams{Source: "src", Table: rt.table, RelaySchema: relaySchema, Layout: st, PurgeOptions: source.PurgeOptions{OlderThan: week, BatchSize: 2}}
}

// TestPurgeLayouts: for every layout that keeps settled rows, Purge deletes
// the delivered rows older than the age and, only when asked, the old dead
// letters; pending rows (old or not, backing off or not), newer settled
// rows and the dead letters' records stay. A dry run deletes nothing.
func TestPurgeLayouts(t *testing.T) {
	t.Parallel()
	for _, rt := range retentionTables {
		t.Run(rt.name(), func(t *testing.T) {
			t.Parallel()
			ctx := context.Background()
			dsn, pool := migrated(t)
			rt.ddl(t, dsn, pool)
			st, l := newStore(t, pool, "src", rt.table, rt.preset, rt.over, false)
			ids := rt.fill(t, pool, 6)
			oldPub, newPub, oldDead, newDead, oldPending, oldRetry := ids[0], ids[1], ids[2], ids[3], ids[4], ids[5]
			settle(t, st, []string{oldPub, newPub}, []string{oldDead, newDead}, []string{oldRetry})
			rt.age(t, pool, 30*24*time.Hour, oldPub, oldDead, oldPending, oldRetry)

			p := purgeParams(l, rt)
			p.IncludeDead, p.DryRun = true, true
			res, err := postgres.Purge(ctx, pool, p)
			if err != nil {
				t.Fatal(err)
			}
			if res.Published != 1 || res.Dead != 1 {
				t.Errorf("dry run counted %d delivered and %d dead, want 1 and 1", res.Published, res.Dead)
			}
			if got := rt.remaining(t, pool); len(got) != 6 {
				t.Fatalf("dry run deleted rows: %d left", len(got))
			}

			p.DryRun, p.IncludeDead = false, false
			if res, err = postgres.Purge(ctx, pool, p); err != nil {
				t.Fatal(err)
			}
			if res.Published != 1 || res.Dead != 0 {
				t.Errorf("purge deleted %d delivered and %d dead, want 1 and 0", res.Published, res.Dead)
			}
			if got, want := rt.remaining(t, pool), sorted(newPub, oldDead, newDead, oldPending, oldRetry); !slices.Equal(got, want) {
				t.Fatalf("after purge: %v, want %v", got, want)
			}

			p.IncludeDead = true
			if res, err = postgres.Purge(ctx, pool, p); err != nil {
				t.Fatal(err)
			}
			if res.Published != 0 || res.Dead != 1 {
				t.Errorf("purge with dead letters deleted %d delivered and %d dead, want 0 and 1", res.Published, res.Dead)
			}
			if got, want := rt.remaining(t, pool), sorted(newPub, newDead, oldPending, oldRetry); !slices.Equal(got, want) {
				t.Fatalf("after purge with dead letters: %v, want %v", got, want)
			}
			// The dead letters' records stay, and so does the retry
			// state of the row that is backing off.
			if n := count(t, pool, "SELECT count(*) FROM outbox_relay.failed_events WHERE replayed_at IS NULL"); n != 2 {
				t.Errorf("%d open dead letters, want 2", n)
			}
			if n := count(t, pool, "SELECT count(*) FROM outbox_relay.retry_state WHERE event_id = $1", oldRetry); n != 1 {
				t.Error("the retry state of a pending row was deleted")
			}
			// The old pending row is still pending: the relay claims it.
			b, err := st.Claim(ctx, 10)
			if err != nil || b == nil {
				t.Fatalf("claim after purge: %v %v", b, err)
			}
			defer func() { _ = b.Release(ctx) }()
			if got := ids4(b.Rows()); !slices.Equal(got, []string{oldPending}) {
				t.Errorf("claim after purge got %v, want the old pending row %s", got, oldPending)
			}
		})
	}
}

func count(t *testing.T, pool *pgxpool.Pool, q string, args ...any) int {
	t.Helper()
	var n int
	if err := pool.QueryRow(context.Background(), q, args...).Scan(&n); err != nil {
		t.Fatalf("%s: %v", q, err)
	}
	return n
}
