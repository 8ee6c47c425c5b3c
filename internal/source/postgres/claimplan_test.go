package postgres_test

import (
	"context"
	"encoding/json"
	"fmt"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"

	"github.com/outbox-relay/outbox-relay/internal/config"
	"github.com/outbox-relay/outbox-relay/internal/fixtures"
	"github.com/outbox-relay/outbox-relay/internal/pgtest"
	"github.com/outbox-relay/outbox-relay/internal/source"
	"github.com/outbox-relay/outbox-relay/internal/source/postgres"
)

// backlogTables are presets' tables with a backlog never analyzed
// (autovacuum off): the table after an outage, as the planner wrongly
// believes it small. (Rows that share their order column, as the rows of
// one transaction share now(), are ordered among themselves by a sort of
// all of them: a claim's cost then also grows with the largest such group.)
var backlogTables = []struct {
	preset string
	table  postgres.Table
	ddl    string
	insert string // $1 rows, spread over 1,000 keys
}{
	{"kafka-outbox", postgres.Table{Schema: "public", Name: "kafka_outbox"}, "",
		`INSERT INTO public.kafka_outbox (topic, key, payload_json) SELECT 't', 'k' || (g % 1000), '{}' FROM generate_series(1, $1) g`},
	{"status", postgres.Table{Schema: "public", Name: "outbox"}, fixtures.Seed001,
		`INSERT INTO public.outbox (aggregate_type, aggregate_id, event_type, topic, payload, created_at)
SELECT 'A', md5((g % 1000)::text)::uuid, 'e', 't', '{}', now() - interval '1 hour' + g * interval '1 ms' FROM generate_series(1, $1) g`},
}

// TestClaimReadsABoundedWindow checks that a claim on a backlog the planner
// knows nothing of reads a number of the table's rows bounded by its
// window, not by the backlog: rules applied once per row of the table (a
// row another relay claimed holds its key; a key held by a row backing off)
// made each claim read the whole backlog once per candidate.
func TestClaimReadsABoundedWindow(t *testing.T) {
	t.Parallel()
	for _, bt := range backlogTables {
		t.Run(bt.preset, func(t *testing.T) {
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
			st, _ := newStore(t, pool, "plan", bt.table, bt.preset, config.Layout{}, true)
			settings, claim := st.ClaimSQL()
			tx, err := pool.Begin(ctx)
			if err != nil {
				t.Fatal(err)
			}
			defer func() { _ = tx.Rollback(ctx) }()
			if _, err := tx.Exec(ctx, settings); err != nil {
				t.Fatal(err)
			}
			stmtCtx, cancel := context.WithTimeout(ctx, 30*time.Second)
			defer cancel()
			var plan []byte
			window := 2 * limit
			if err := tx.QueryRow(stmtCtx, "EXPLAIN (ANALYZE, FORMAT JSON) "+claim, pgx.QueryExecModeSimpleProtocol,
				"plan", limit, window).Scan(&plan); err != nil {
				t.Fatalf("explain the claim (a plan that reads the backlog per row does not finish): %v", err)
			}
			read, claimed := rowsRead(t, plan, bt.table.Name)
			if claimed != limit {
				t.Errorf("the claim took %d rows, want %d", claimed, limit)
			}
			if read > 3*window {
				t.Errorf("the claim read %d rows of a %d-row backlog; a claim of %d over a window of %d should read at most %d:\n%s",
					read, backlog, limit, window, 3*window, plan)
			}
		})
	}
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

// TestHeldHeadDoesNotStarveOtherKeys checks that a key backing off with
// many rows at the head of the order holds only itself: a claim whose
// window would be filled by that key's rows still takes the other keys.
func TestHeldHeadDoesNotStarveOtherKeys(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	_, pool := migrated(t)
	tbl := postgres.Table{Schema: "public", Name: "outbox"}
	pgtest.Exec(t, pool, fixtures.Seed001)
	const held = 3000
	agg := func(k int) string { return fmt.Sprintf("00000000-0000-0000-0000-%012d", k) }
	if _, err := pool.Exec(ctx, `INSERT INTO public.outbox (aggregate_type, aggregate_id, event_type, topic, payload, created_at)
SELECT 'A', $1::uuid, 'e', 't', '{}', now() - interval '1 hour' + g * interval '1 ms' FROM generate_series(1, $2) g`, agg(1), held); err != nil {
		t.Fatal(err)
	}
	if _, err := pool.Exec(ctx, `INSERT INTO public.outbox (aggregate_type, aggregate_id, event_type, topic, payload)
SELECT 'A', $1::uuid, 'e', 't', '{}' FROM generate_series(1, 10)`, agg(2)); err != nil {
		t.Fatal(err)
	}
	st, _ := newStore(t, pool, "starve", tbl, "status", config.Layout{}, true)
	b, err := st.Claim(ctx, 1)
	if err != nil || b == nil {
		t.Fatalf("claim: %v", err)
	}
	if got := b.Rows()[0].AggregateID; got != agg(1) {
		t.Fatalf("the first row is of %s, want %s", got, agg(1))
	}
	if err := b.Complete(ctx, source.Outcome{Retry: []source.Retry{{Index: 0, Attempts: 1, At: time.Now().Add(time.Hour), Err: "down"}}}); err != nil {
		t.Fatal(err)
	}
	b, err = st.Claim(ctx, 5)
	if err != nil {
		t.Fatal(err)
	}
	if b == nil {
		t.Fatalf("no row claimed: %d rows of a key backing off kept every other key waiting", held)
	}
	defer func() { _ = b.Release(ctx) }()
	for _, r := range b.Rows() {
		if r.AggregateID != agg(2) {
			t.Errorf("claimed a row of %s, want only %s (the other is backing off)", r.AggregateID, agg(2))
		}
	}
	if len(b.Rows()) != 5 {
		t.Errorf("claimed %d rows, want 5", len(b.Rows()))
	}
}
