package bench

import (
	"context"
	"fmt"
	"strconv"
	"strings"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgxpool"

	"github.com/outbox-relay/outbox-relay/internal/config"
)

// table is the benchmark's outbox table in its own schema.
type table struct {
	schema string
	layout string // delete|mark
}

func (t table) name() string { return t.schema + ".outbox" }

// create makes the schema and the table with the indexes the layout's claim
// query uses.
func (t table) create(ctx context.Context, pool *pgxpool.Pool) error {
	ddl := fmt.Sprintf(`CREATE SCHEMA %[1]s;
CREATE TABLE %[1]s.outbox (
  id BIGSERIAL PRIMARY KEY,
  aggregate_id TEXT NOT NULL,
  event_type TEXT NOT NULL,
  payload JSONB NOT NULL,
  created_at TIMESTAMPTZ NOT NULL DEFAULT clock_timestamp(),
  published BOOLEAN NOT NULL DEFAULT false,
  published_at TIMESTAMPTZ
);`, t.schema)
	if t.layout == "mark" {
		ddl += fmt.Sprintf("CREATE INDEX outbox_pending ON %s.outbox (id) WHERE published = false;", t.schema)
	}
	if _, err := pool.Exec(ctx, ddl); err != nil {
		return fmt.Errorf("create benchmark table: %w", err)
	}
	return nil
}

// source is the relay's source for the table.
func (t table) source(topic string, batch, pipeline int, ordering bool) config.Source {
	l := config.Layout{
		ID: "id", Payload: "payload", PayloadFormat: "json", Topic: topic, Key: "{aggregate_id}",
		EventType: "event_type", CreatedAt: "created_at", OrderBy: "id",
		State: config.State{Mode: "delete"},
	}
	if t.layout == "mark" {
		l.State = config.State{Mode: "flag", Flag: "published", PublishedAt: []string{"published_at"}}
	}
	return config.Source{Name: "bench", Table: t.name(), Layout: l, BatchSize: batch, Pipeline: pipeline, Ordering: &ordering}
}

// reset empties the table for the next measurement.
func (t table) reset(ctx context.Context, pool *pgxpool.Pool) error {
	_, err := pool.Exec(ctx, "TRUNCATE "+t.name())
	return err
}

// fill loads n rows with COPY: keys spread over keys aggregates, payloads of
// about payloadBytes bytes of JSON.
func (t table) fill(ctx context.Context, pool *pgxpool.Pool, n, keys, payloadBytes int) error {
	pad := strings.Repeat("x", max(payloadBytes-40, 0))
	i := 0
	src := pgx.CopyFromFunc(func() ([]any, error) {
		if i >= n {
			return nil, nil
		}
		k := "key-" + strconv.Itoa(i%keys)
		row := []any{k, "bench.event", `{"seq":` + strconv.Itoa(i) + `,"key":"` + k + `","pad":"` + pad + `"}`}
		i++
		return row, nil
	})
	if _, err := pool.CopyFrom(ctx, pgx.Identifier{t.schema, "outbox"}, []string{"aggregate_id", "event_type", "payload"}, src); err != nil {
		return fmt.Errorf("prefill: %w", err)
	}
	if _, err := pool.Exec(ctx, "VACUUM ANALYZE "+t.name()); err != nil {
		return fmt.Errorf("vacuum: %w", err)
	}
	return nil
}

func (t table) drop(ctx context.Context, pool *pgxpool.Pool) {
	_, _ = pool.Exec(ctx, "DROP SCHEMA IF EXISTS "+t.schema+" CASCADE")
}
