package postgres_test

import (
	"context"
	"encoding/json"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgtype"

	"github.com/outbox-relay/outbox-relay/internal/fixtures"
	"github.com/outbox-relay/outbox-relay/internal/layout"
	"github.com/outbox-relay/outbox-relay/internal/pgtest"
	"github.com/outbox-relay/outbox-relay/internal/source"
	"github.com/outbox-relay/outbox-relay/internal/source/postgres"
)

// backlogTable is a preset's table with a backlog never analyzed
// (autovacuum off): the table after an outage, as the planner wrongly
// believes it small. (Rows that share their order column, as the rows of
// one transaction share now(), are ordered among themselves by a sort of
// all of them: a claim's cost then also grows with the largest such group.)
type backlogTable struct {
	preset string
	table  postgres.Table
	ddl    string
	// insert makes $1 pending rows spread over 1,000 keys and, where the
	// layout keeps delivered rows, as many delivered ones before them.
	insert string
}

// backlogTables are the presets' backlog tables.
var backlogTables = []backlogTable{
	{"kafka-outbox", postgres.Table{Schema: "public", Name: "kafka_outbox"}, "",
		`INSERT INTO public.kafka_outbox (topic, key, payload_json, push_completed_at)
SELECT 't', 'k' || (g % 1000), '{}', CASE WHEN g <= $1 THEN now() END FROM generate_series(1, 2 * $1) g`},
	{"delete", postgres.Table{Schema: "public", Name: "outbox"},
		`CREATE TABLE public.outbox (id bigserial PRIMARY KEY, topic text, key text, payload jsonb NOT NULL)`,
		`INSERT INTO public.outbox (topic, key, payload) SELECT 't', 'k' || (g % 1000), '{}' FROM generate_series(1, $1) g`},
	{"published-flag", postgres.Table{Schema: "journey_matcher", Name: "outbox"}, fixtures.Seed000,
		`INSERT INTO journey_matcher.outbox (aggregate_id, aggregate_type, event_type, payload, correlation_id, created_at, published)
SELECT md5((g % 1000)::text)::uuid, 'A', 'e', '{}', gen_random_uuid(), now() - interval '1 hour' + g * interval '1 ms', g <= $1
FROM generate_series(1, 2 * $1) g`},
	{"prisma", postgres.Table{Schema: "tenant", Name: "OutboxEvent"}, fixtures.Seed002,
		`INSERT INTO tenant."OutboxEvent" ("id", "tenantId", "eventType", "aggregateType", "aggregateId", "payload", "createdAt", "status")
SELECT gen_random_uuid()::text, 't', 'e', 'A', 'a' || (g % 1000), '{}', now() - interval '1 hour' + g * interval '1 ms',
  CASE WHEN g <= $1 THEN 'published' ELSE 'pending' END::core."OutboxStatus"
FROM generate_series(1, 2 * $1) g`},
	{"status", postgres.Table{Schema: "public", Name: "outbox"}, fixtures.Seed001,
		`INSERT INTO public.outbox (aggregate_type, aggregate_id, event_type, topic, payload, created_at, status)
SELECT 'A', md5((g % 1000)::text)::uuid, 'e', 't', '{}', now() - interval '1 hour' + g * interval '1 ms',
  CASE WHEN g <= $1 THEN 'published' ELSE 'pending' END FROM generate_series(1, 2 * $1) g`},
}

// TestClaimReadsABoundedWindow checks that a claim on a backlog the planner
// knows nothing of reads a number of the table's rows bounded by its batch
// (its window, for a claim that reads one), not by the backlog nor by the
// delivered rows the table keeps: a sort of
// every pending row, or a rule applied once per row of the table (a row
// another relay claimed holds its key), made each claim read the whole
// backlog, or read it once per candidate. The claim of one bucket of a
// source split in 4 (sources[].shards) reads at most 4 times as many rows:
// it passes over the other buckets' rows.
func TestClaimReadsABoundedWindow(t *testing.T) {
	t.Parallel()
	for _, tc := range backlogCases() {
		bt := tc.backlogTable
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			ctx := context.Background()
			dsn, pool := migrated(t)
			if bt.ddl != "" {
				pgtest.Exec(t, pool, bt.ddl)
			} else if err := postgres.MigrateTable(ctx, dsn, bt.table); err != nil {
				t.Fatal(err)
			}
			pgtest.Exec(t, pool, "ALTER TABLE "+bt.table.String()+" SET (autovacuum_enabled = false)")
			const backlog, limit = 20_000, 500
			if _, err := pool.Exec(ctx, bt.insert, backlog); err != nil {
				t.Fatal(err)
			}
			st, l := newStore(t, pool, "plan", bt.table, bt.preset, layout.Spec{}, true)
			if tc.bucket.Split() {
				st = postgres.New(pool, postgres.Options{Source: "plan", Table: bt.table, RelaySchema: relaySchema, Layout: l,
					Ordering: tc.ordering, Bucket: tc.bucket})
			}
			settings, claim, windowed, ownRows := st.ClaimSQL()
			tx, err := pool.Begin(ctx)
			if err != nil {
				t.Fatal(err)
			}
			defer func() { _ = tx.Rollback(ctx) }()
			if _, err := tx.Exec(ctx, settings, "60000"); err != nil {
				t.Fatal(err)
			}
			stmtCtx, cancel := context.WithTimeout(ctx, 30*time.Second)
			defer cancel()
			var plan []byte
			window := 2 * limit
			args := []any{pgx.QueryExecModeSimpleProtocol, "plan", limit}
			if windowed {
				args = append(args, window)
			}
			if ownRows {
				args = append(args, []pgtype.TID{})
			}
			if err := tx.QueryRow(stmtCtx, "EXPLAIN (ANALYZE, FORMAT JSON) "+claim, args...).Scan(&plan); err != nil {
				t.Fatalf("explain the claim (a plan that reads the backlog per row does not finish): %v", err)
			}
			read, claimed := rowsRead(t, plan, bt.table.Name)
			if claimed != limit {
				t.Errorf("the claim took %d rows, want %d", claimed, limit)
			}
			// A bucket's window passes over the other buckets' rows.
			if most := (2 + max(tc.bucket.Count, 1)) * window; read > most {
				t.Errorf("the claim read %d rows of a %d-row backlog; a claim of %d should read at most %d:\n%s",
					read, backlog, limit, most, plan)
			}
			t.Logf("the claim read %d rows", read)
		})
	}
}

// backlogCase is a backlog table and the bucket a claim takes of it (a
// whole source is claimed with ordering on).
type backlogCase struct {
	name string
	backlogTable
	bucket   source.Bucket
	ordering bool
}

// backlogCases are every backlog table claimed whole, and claimed by the
// store of bucket 1 of 4 with ordering on and off (two forms of the claim).
func backlogCases() []backlogCase {
	var out []backlogCase
	b := source.Bucket{Index: 1, Count: 4}
	for _, bt := range backlogTables {
		out = append(out, backlogCase{bt.preset, bt, source.Bucket{}, true},
			backlogCase{bt.preset + "/bucket-1-of-4", bt, b, true},
			backlogCase{bt.preset + "/bucket-1-of-4/ordering-off", bt, b, false})
	}
	return out
}

// rowsRead sums, over the plan's nodes that read the table, the rows each
// produced and removed, every loop counted; and returns the rows the
// claim returned.
func rowsRead(t *testing.T, plan []byte, table string) (read, returned int) {
	t.Helper()
	type node struct {
		Relation string  `json:"Relation Name"`
		Rows     float64 `json:"Actual Rows"`
		Loops    float64 `json:"Actual Loops"`
		Removed  float64 `json:"Rows Removed by Filter"`
		Plans    []node  `json:"Plans"`
	}
	var out []struct{ Plan node }
	if err := json.Unmarshal(plan, &out); err != nil || len(out) != 1 {
		t.Fatalf("plan %s: %v", plan, err)
	}
	var walk func(n node)
	walk = func(n node) {
		if n.Relation == table {
			read += int((n.Rows + n.Removed) * n.Loops)
		}
		for _, c := range n.Plans {
			walk(c)
		}
	}
	walk(out[0].Plan)
	return read, int(out[0].Plan.Rows)
}
