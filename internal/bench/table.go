package bench

import (
	"context"
	"fmt"
	"strings"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgxpool"

	"github.com/outbox-relay/outbox-relay/internal/config"
	"github.com/outbox-relay/outbox-relay/internal/source/queue"
)

// table is the benchmark's outbox table in its own schema, of one shape.
type table struct {
	schema string
	layout string // the layout's or preset's name, for the report
	sh     *shape
	dsn    string // for the queue's migrations
}

func newTable(name string, sh *shape, dsn string) table {
	return table{schema: newSchema(), layout: name, sh: sh, dsn: dsn}
}

func (t table) name() string { return t.schema + "." + t.sh.table }

// names are the table and the shape's other tables, qualified.
func (t table) names() []string {
	out := []string{t.name()}
	for _, e := range t.sh.extra {
		out = append(out, t.schema+"."+e)
	}
	return out
}

// create makes the schema and the table with the indexes its claim query
// uses: the shape's DDL, run with the schema as search_path, or the
// queue's migrations. The relay's migrations make kafka_outbox (openRelay).
func (t table) create(ctx context.Context, pool *pgxpool.Pool) error {
	if t.sh.preset == "payment-queue" {
		// Seed 003's tables, as preset payment-queue's migrations make them.
		if err := queue.Migrate(ctx, t.dsn, t.schema); err != nil {
			return fmt.Errorf("create benchmark queue: %w", err)
		}
		return nil
	}
	err := pgx.BeginFunc(ctx, pool, func(tx pgx.Tx) error {
		if _, err := tx.Exec(ctx, "CREATE SCHEMA "+t.schema+"; SET LOCAL search_path TO "+t.schema); err != nil {
			return err
		}
		if t.sh.ddl == "" {
			return nil
		}
		_, err := tx.Exec(ctx, expand(t.sh.ddl, t.schema))
		return err
	})
	if err != nil {
		return fmt.Errorf("create benchmark table %s: %w", t.layout, err)
	}
	return nil
}

// expand puts name where ddl says %[1]s.
func expand(ddl, name string) string { return strings.ReplaceAll(ddl, "%[1]s", name) }

// autovacuumOff keeps autovacuum, and so its automatic ANALYZE, away from
// the shape's tables: their statistics stay what the benchmark made them.
func (t table) autovacuumOff(ctx context.Context, pool *pgxpool.Pool) error {
	for _, n := range t.names() {
		if _, err := pool.Exec(ctx, "ALTER TABLE "+n+" SET (autovacuum_enabled = false, toast.autovacuum_enabled = false)"); err != nil {
			return fmt.Errorf("autovacuum off on %s: %w", n, err)
		}
	}
	return nil
}

// source is the relay's source for the table.
func (t table) source(topic string, batch, pipeline int, ordering bool) config.Source {
	s := config.Source{Name: "bench", Table: t.name(), BatchSize: batch, Pipeline: pipeline, Ordering: &ordering}
	if t.sh.preset == "" {
		s.Layout = t.sh.layout
		s.Layout.Topic = topic
		return s
	}
	s.Preset, s.Topic = t.sh.preset, topic
	return s
}

// reset empties the table for the next measurement.
func (t table) reset(ctx context.Context, pool *pgxpool.Pool) error {
	_, err := pool.Exec(ctx, "TRUNCATE "+strings.Join(t.names(), ", "))
	return err
}

// fill loads n rows for topic with COPY (keys spread over keys, payloads of about
// payloadBytes bytes of JSON) and, when analyze, runs VACUUM ANALYZE.
func (t table) fill(ctx context.Context, pool *pgxpool.Pool, topic string, n, keys, payloadBytes int, analyze bool) error {
	g := newRowGen(n, keys, payloadBytes, topic)
	i := 0
	src := pgx.CopyFromFunc(func() ([]any, error) {
		if i >= n {
			return nil, nil
		}
		i++
		return t.sh.row(g, i-1), nil
	})
	if _, err := pool.CopyFrom(ctx, pgx.Identifier{t.schema, strings.Trim(t.sh.table, `"`)}, t.sh.cols, src); err != nil {
		return fmt.Errorf("prefill: %w", err)
	}
	if !analyze {
		return nil
	}
	if _, err := pool.Exec(ctx, "VACUUM ANALYZE "+strings.Join(t.names(), ", ")); err != nil {
		return fmt.Errorf("vacuum: %w", err)
	}
	return nil
}

// plannerRows is the table's row count as the planner sees it
// (pg_class.reltuples; -1 when never vacuumed or analyzed).
func (t table) plannerRows(ctx context.Context, pool *pgxpool.Pool) *int64 {
	var n int64
	if err := pool.QueryRow(ctx, "SELECT reltuples::bigint FROM pg_class WHERE oid = $1::regclass", t.name()).Scan(&n); err != nil {
		return nil
	}
	return &n
}

func (t table) drop(ctx context.Context, pool *pgxpool.Pool) {
	_, _ = pool.Exec(ctx, "DROP SCHEMA IF EXISTS "+t.schema+" CASCADE")
}
