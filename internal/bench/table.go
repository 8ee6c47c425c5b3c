package bench

import (
	"context"
	"fmt"
	"slices"
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

// in is t in the database dsn connects to: --databases makes the same
// schema and table in each.
func (t table) in(dsn string) table { t.dsn = dsn; return t }

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

// fill loads history delivered rows (deliveredState) and then n pending
// ones for topic with COPY (keys spread over keys, payloads of about
// payloadBytes bytes of JSON) and, when analyze, runs VACUUM ANALYZE. The
// history comes first, so that it is older and, in the claim's order,
// before the backlog.
func (t table) fill(ctx context.Context, pool *pgxpool.Pool, topic string, history, n, keys, payloadBytes int, analyze bool) error {
	g := newRowGen(history+n, keys, payloadBytes, topic)
	name := pgx.Identifier{t.schema, strings.Trim(t.sh.table, `"`)}
	if history > 0 {
		d, err := t.delivered(ctx, pool)
		if err != nil {
			return err
		}
		i := 0
		src := pgx.CopyFromFunc(func() ([]any, error) {
			if i >= history {
				return nil, nil
			}
			i++
			return append(t.sh.row(g, i-1), d.values(i-1, g.deliveredAt(i-1))...), nil
		})
		if _, err := pool.CopyFrom(ctx, name, append(slices.Clip(t.sh.cols), d.cols...), src); err != nil {
			return fmt.Errorf("prefill the history: %w", err)
		}
	}
	i := history
	src := pgx.CopyFromFunc(func() ([]any, error) {
		if i >= history+n {
			return nil, nil
		}
		i++
		return t.sh.row(g, i-1), nil
	})
	if _, err := pool.CopyFrom(ctx, name, t.sh.cols, src); err != nil {
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

// delivered is the table's delivered state (deliveredState).
func (t table) delivered(ctx context.Context, pool *pgxpool.Pool) (delivered, error) {
	rows, err := pool.Query(ctx, "SELECT column_name FROM information_schema.columns WHERE table_schema = $1 AND table_name = $2",
		t.schema, strings.Trim(t.sh.table, `"`))
	if err != nil {
		return delivered{}, fmt.Errorf("read the columns of %s: %w", t.name(), err)
	}
	cols, err := pgx.CollectRows(rows, pgx.RowTo[string])
	if err != nil {
		return delivered{}, fmt.Errorf("read the columns of %s: %w", t.name(), err)
	}
	d, err := deliveredState(t.sh.spec(), func(c string) bool { return slices.Contains(cols, c) })
	if err != nil {
		return d, fmt.Errorf("%s: %w", t.layout, err)
	}
	return d, nil
}

// counts are the table's rows and, of them, those delivered (their
// published-at column set), after a relay phase.
func (t table) counts(ctx context.Context, pool *pgxpool.Pool) (rows, done int, err error) {
	d, err := t.delivered(ctx, pool)
	if err != nil {
		return 0, 0, err
	}
	q := "SELECT COUNT(*), COUNT(" + pgx.Identifier{d.publishedAt}.Sanitize() + ") FROM " + t.name()
	if err := pool.QueryRow(ctx, q).Scan(&rows, &done); err != nil {
		return 0, 0, fmt.Errorf("count the rows of %s: %w", t.name(), err)
	}
	return rows, done, nil
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
