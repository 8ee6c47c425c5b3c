package pgtest

import (
	"context"
	"errors"
	"testing"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgxpool"

	"github.com/outbox-relay/outbox-relay/internal/source"
	"github.com/outbox-relay/outbox-relay/internal/source/sourcetest"
)

// DeadLetters reads, from the relay schema outbox_relay, the dead letters
// of the row with id of table schema.name, oldest first: what a
// conformance harness on PostgreSQL reports.
func DeadLetters(t testing.TB, pool *pgxpool.Pool, schema, name, id string) []sourcetest.DeadLetter {
	t.Helper()
	rows, err := pool.Query(context.Background(), `SELECT failure_reason, failure_count FROM outbox_relay.failed_events
WHERE source_schema = $1 AND source_table = $2 AND original_event_id = $3 ORDER BY created_at`, schema, name, id)
	if err != nil {
		t.Fatal(err)
	}
	out, err := pgx.CollectRows(rows, func(r pgx.CollectableRow) (sourcetest.DeadLetter, error) {
		var d sourcetest.DeadLetter
		err := r.Scan(&d.Reason, &d.Attempts)
		return d, err
	})
	if err != nil {
		t.Fatal(err)
	}
	return out
}

// Totals reads the counters outbox_relay.relay_state keeps for the source
// named src; zero values when it has no row.
func Totals(t testing.TB, pool *pgxpool.Pool, src string) source.Stats {
	t.Helper()
	var s source.Stats
	err := pool.QueryRow(context.Background(), `SELECT total_events_published, total_events_retried, total_events_dead_lettered,
  COALESCE(last_published_event_id, '') FROM outbox_relay.relay_state WHERE source = $1`, src).
		Scan(&s.Published, &s.Retried, &s.DeadLettered, &s.LastPublishedID)
	if err != nil && !errors.Is(err, pgx.ErrNoRows) {
		t.Fatal(err)
	}
	return s
}
