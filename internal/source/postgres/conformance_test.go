package postgres_test

import (
	"context"
	"fmt"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgxpool"

	"github.com/outbox-relay/outbox-relay/internal/layout"
	"github.com/outbox-relay/outbox-relay/internal/pgtest"
	"github.com/outbox-relay/outbox-relay/internal/source"
	"github.com/outbox-relay/outbox-relay/internal/source/postgres"
	"github.com/outbox-relay/outbox-relay/internal/source/sourcetest"
)

// TestConformance runs the store conformance suite on PostgreSQL.
func TestConformance(t *testing.T) {
	t.Parallel()
	dsn, pool := migrated(t)
	sourcetest.Run(t, &pgHarness{dsn: dsn, pool: pool})
}

// pgHarness makes each table in a schema of its own, in one migrated
// database.
type pgHarness struct {
	dsn  string
	pool *pgxpool.Pool
}

func (h *pgHarness) Presets() []string { return []string{"delete", "status", "kafka-outbox"} }

// The tables of the presets, with every column each preset names. created_at
// takes clock_timestamp() so that rows inserted in one transaction still
// sort in insertion order.
const (
	deleteTable = `CREATE TABLE %s (
  id bigserial PRIMARY KEY,
  topic text,
  key text,
  payload jsonb NOT NULL
)`
	statusTable = `CREATE TABLE %s (
  id uuid PRIMARY KEY DEFAULT gen_random_uuid(),
  aggregate_type varchar(100) NOT NULL DEFAULT 'Test',
  aggregate_id text,
  event_type varchar(100) NOT NULL DEFAULT 'test.event',
  topic varchar(100) NOT NULL,
  partition_key varchar(100),
  payload jsonb NOT NULL,
  headers jsonb,
  status varchar(20) NOT NULL DEFAULT 'pending' CHECK (status IN ('pending', 'published', 'failed')),
  retry_count smallint NOT NULL DEFAULT 0,
  max_retries smallint NOT NULL DEFAULT 5,
  published_at timestamptz,
  created_at timestamptz NOT NULL DEFAULT clock_timestamp()
)`
)

func (h *pgHarness) NewTable(t *testing.T, preset string) sourcetest.Table {
	t.Helper()
	ctx := context.Background()
	schema := "st_" + pgtest.Suffix()
	pgtest.Exec(t, h.pool, "CREATE SCHEMA "+schema)
	t.Cleanup(func() { _, _ = h.pool.Exec(context.Background(), "DROP SCHEMA "+schema+" CASCADE") })
	tbl := postgres.Table{Schema: schema, Name: "outbox"}
	switch preset {
	case "delete":
		pgtest.Exec(t, h.pool, sprintf(deleteTable, tbl))
	case "status":
		pgtest.Exec(t, h.pool, sprintf(statusTable, tbl))
	case "kafka-outbox":
		// The relay's own migrations make it, as in production.
		tbl.Name = "kafka_outbox"
		if err := postgres.MigrateTable(ctx, h.dsn, tbl); err != nil {
			t.Fatal(err)
		}
	default:
		t.Fatalf("no table for preset %q", preset)
	}
	merged, explicit, err := layout.Merge(preset, layout.Spec{}, "")
	if err != nil {
		t.Fatal(err)
	}
	cols, err := postgres.Columns(ctx, h.pool, tbl)
	if err != nil {
		t.Fatal(err)
	}
	l, err := layout.Resolve(merged, explicit, tbl.String(), cols)
	if err != nil {
		t.Fatal(err)
	}
	return &pgTable{h: h, preset: preset, table: tbl, layout: l}
}

type pgTable struct {
	h      *pgHarness
	preset string
	table  postgres.Table
	layout *layout.Layout
}

func sprintf(format string, t postgres.Table) string {
	return fmt.Sprintf(format, t.String())
}

func (tb *pgTable) Open(t *testing.T, o sourcetest.Options) sourcetest.Store {
	t.Helper()
	pool, k := pgtest.OwnPool(t, tb.h.dsn, tb.h.pool)
	return &pgStore{
		Store: postgres.New(pool, postgres.Options{Source: o.Source, Table: tb.table, RelaySchema: relaySchema,
			Layout: tb.layout, Ordering: o.Ordering, ClaimTimeout: o.ClaimTimeout, Bucket: o.Bucket, Priority: o.Priority}),
		Killer: k,
	}
}

// pgStore is a store whose connections Kill cuts.
type pgStore struct {
	*postgres.Store
	pgtest.Killer
}

func (tb *pgTable) Insert(t *testing.T, rows ...sourcetest.Row) []string {
	t.Helper()
	var q string
	switch tb.preset {
	case "delete":
		q = `INSERT INTO %s (topic, key, payload) VALUES ($1, NULLIF($2, ''), $3::jsonb) RETURNING id::text`
	case "status":
		q = `INSERT INTO %s (topic, aggregate_id, partition_key, payload, headers)
VALUES ($1, NULLIF($2, ''), NULLIF($3, ''), $4::jsonb, NULLIF($5, '')::jsonb) RETURNING id::text`
	case "kafka-outbox":
		q = `INSERT INTO %s (topic, key, partition_key, payload_json, payload_headers) VALUES ($1, $2, $3, $4, $5) RETURNING id::text`
	}
	q = sprintf(q, tb.table)
	ids := make([]string, len(rows))
	for i, r := range rows {
		args := []any{r.Topic, r.Key, r.PartitionKey, r.Payload, r.Headers}
		if tb.preset == "delete" {
			args = []any{r.Topic, r.Key, r.Payload}
		}
		if err := tb.h.pool.QueryRow(context.Background(), q, args...).Scan(&ids[i]); err != nil {
			t.Fatalf("insert: %v", err)
		}
	}
	return ids
}

func (tb *pgTable) State(t *testing.T, id string) sourcetest.RowState {
	t.Helper()
	var q string
	switch tb.preset {
	case "delete":
		q = `SELECT true, false, false, 0, '', '', NULL::timestamptz FROM %s WHERE id = $1::bigint`
	case "status":
		q = `SELECT status = 'pending', status = 'published' AND published_at IS NOT NULL, status = 'failed', retry_count, '', '', NULL::timestamptz
FROM %s WHERE id = $1::uuid`
	case "kafka-outbox":
		q = `SELECT push_completed_at IS NULL AND errored = 0, push_completed_at IS NOT NULL, errored = 1, push_attempts, error_reason,
  COALESCE(batch_id, ''), push_started_at::timestamptz
FROM %s WHERE id = $1::bigint`
	}
	st := sourcetest.RowState{Exists: true}
	var claimed *time.Time
	err := tb.h.pool.QueryRow(context.Background(), sprintf(q, tb.table), id).
		Scan(&st.Pending, &st.Published, &st.Failed, &st.Attempts, &st.Error, &st.BatchID, &claimed)
	if err == pgx.ErrNoRows {
		return sourcetest.RowState{}
	}
	if err != nil {
		t.Fatalf("row state: %v", err)
	}
	if claimed != nil {
		st.ClaimedAt = *claimed
	}
	return st
}

func (tb *pgTable) DeadLetters(t *testing.T, id string) []sourcetest.DeadLetter {
	return pgtest.DeadLetters(t, tb.h.pool, tb.table.Schema, tb.table.Name, id)
}

func (tb *pgTable) Totals(t *testing.T, src string) source.Stats {
	return pgtest.Totals(t, tb.h.pool, src)
}

func (tb *pgTable) ClaimElsewhere(t *testing.T, id string, at time.Time) {
	t.Helper()
	_, err := tb.h.pool.Exec(context.Background(), sprintf(`UPDATE %s SET batch_id = gen_random_uuid()::text, push_started_at = $2::timestamptz
WHERE id = $1::bigint`, tb.table), id, at)
	if err != nil {
		t.Fatal(err)
	}
}
