package bench

import (
	"context"
	"fmt"
	"strconv"
	"strings"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgxpool"

	"github.com/outbox-relay/outbox-relay/internal/config"
	"github.com/outbox-relay/outbox-relay/internal/layout"
	"github.com/outbox-relay/outbox-relay/internal/source/queue"
)

// table is the benchmark's outbox table in its own schema.
type table struct {
	schema string
	layout string // delete|mark|queue
	dsn    string // for the queue's migrations
}

func (t table) name() string {
	if t.layout == "queue" {
		return t.schema + ".payment_outbox_pending"
	}
	return t.schema + ".outbox"
}

// create makes the schema and the table with the indexes the layout's claim
// query uses.
func (t table) create(ctx context.Context, pool *pgxpool.Pool) error {
	if t.layout == "queue" {
		// Seed 003's tables, as preset payment-queue's migrations make them.
		if err := queue.Migrate(ctx, t.dsn, t.schema); err != nil {
			return fmt.Errorf("create benchmark queue: %w", err)
		}
		return nil
	}
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
	l := layout.Spec{
		ID: "id", Payload: "payload", PayloadFormat: "json", Topic: topic, Key: "{aggregate_id}",
		EventType: "event_type", CreatedAt: "created_at", OrderBy: "id",
		State: layout.State{Mode: "delete"},
	}
	if t.layout == "mark" {
		l.State = layout.State{Mode: "flag", Flag: "published", PublishedAt: []string{"published_at"}}
	}
	if t.layout == "queue" {
		return config.Source{Name: "bench", Table: t.name(), Preset: config.QueuePreset, Topic: topic,
			BatchSize: batch, Pipeline: pipeline, Ordering: &ordering}
	}
	return config.Source{Name: "bench", Table: t.name(), Layout: l, BatchSize: batch, Pipeline: pipeline, Ordering: &ordering}
}

// reset empties the table for the next measurement.
func (t table) reset(ctx context.Context, pool *pgxpool.Pool) error {
	q := "TRUNCATE " + t.name()
	if t.layout == "queue" {
		q += ", " + t.schema + ".payment_outbox_attempts"
	}
	_, err := pool.Exec(ctx, q)
	return err
}

// fill loads n rows with COPY: keys spread over keys aggregates, payloads of
// about payloadBytes bytes of JSON.
func (t table) fill(ctx context.Context, pool *pgxpool.Pool, n, keys, payloadBytes int) error {
	if t.layout == "queue" {
		return t.fillQueue(ctx, pool, n, keys, payloadBytes)
	}
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

// fillQueue loads n payments with COPY: participants are the keys, each
// with its sequence numbers 1, 2, ... in insert order.
func (t table) fillQueue(ctx context.Context, pool *pgxpool.Pool, n, keys, payloadBytes int) error {
	pad := strings.Repeat("x", max(payloadBytes-90, 0))
	i := 0
	src := pgx.CopyFromFunc(func() ([]any, error) {
		if i >= n {
			return nil, nil
		}
		p := "participant-" + strconv.Itoa(i%keys)
		row := []any{"ins-" + strconv.Itoa(i), p, int64(i/keys + 1), "key-" + strconv.Itoa(i), "sepa",
			`{"amount":` + strconv.Itoa(100+i%1000) + `,"currency":"EUR","destination":{"account":"DE89370400440532013000"},"pad":"` + pad + `"}`}
		i++
		return row, nil
	})
	cols := []string{"instruction_id", "participant_id", "sequence_id", "idempotency_key", "rail_type", "payload"}
	if _, err := pool.CopyFrom(ctx, pgx.Identifier{t.schema, "payment_outbox_pending"}, cols, src); err != nil {
		return fmt.Errorf("prefill: %w", err)
	}
	if _, err := pool.Exec(ctx, "VACUUM ANALYZE "+t.name()+", "+t.schema+".payment_outbox_attempts"); err != nil {
		return fmt.Errorf("vacuum: %w", err)
	}
	return nil
}

func (t table) drop(ctx context.Context, pool *pgxpool.Pool) {
	_, _ = pool.Exec(ctx, "DROP SCHEMA IF EXISTS "+t.schema+" CASCADE")
}
