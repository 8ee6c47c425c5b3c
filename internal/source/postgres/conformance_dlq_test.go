package postgres_test

import (
	"context"
	"sync"
	"testing"
	"time"

	"github.com/outbox-relay/outbox-relay/internal/source"
	"github.com/outbox-relay/outbox-relay/internal/source/postgres"
)

// The dead-letter and retention side of the conformance harness.

func (tb *pgTable) ListFailed(t *testing.T, f source.DLQFilter) []source.FailedEvent {
	t.Helper()
	evs, err := postgres.ListFailed(context.Background(), tb.h.pool, relaySchema, f)
	if err != nil {
		t.Fatal(err)
	}
	return evs
}

func (tb *pgTable) PurgeDead(t *testing.T, ids []string, actor string) int {
	t.Helper()
	n, err := postgres.PurgeDead(context.Background(), tb.h.pool, relaySchema, ids, actor)
	if err != nil {
		t.Fatal(err)
	}
	return n
}

func (tb *pgTable) Purge(t *testing.T, src string, o source.PurgeOptions) (source.PurgeResult, error) {
	t.Helper()
	return postgres.Purge(context.Background(), tb.h.pool, postgres.PurgeParams{Source: src, Table: tb.table, RelaySchema: relaySchema, Layout: tb.layout, PurgeOptions: o})
}

func (tb *pgTable) Audit(t *testing.T, deadLetterID string) []string {
	t.Helper()
	return column(t, tb.h.pool, `SELECT action FROM outbox_relay.failed_event_audit
WHERE failed_event_id::text = $1 ORDER BY id`, deadLetterID)
}

func (tb *pgTable) Backdate(t *testing.T, id string, d time.Duration) {
	t.Helper()
	var q string
	switch tb.preset {
	case "delete":
		return
	case "status":
		q = `UPDATE %s SET created_at = created_at - make_interval(secs => $2), published_at = published_at - make_interval(secs => $2)
WHERE id = $1::uuid`
	case "kafka-outbox":
		q = `UPDATE %s SET created_at = created_at - make_interval(secs => $2),
  push_completed_at = push_completed_at - make_interval(secs => $2) WHERE id = $1::bigint`
	}
	if _, err := tb.h.pool.Exec(context.Background(), sprintf(q, tb.table), id, d.Seconds()); err != nil {
		t.Fatalf("backdate: %v", err)
	}
}

func (tb *pgTable) BackdateReplay(t *testing.T, deadLetterID string, d time.Duration) {
	t.Helper()
	_, err := tb.h.pool.Exec(context.Background(), `UPDATE outbox_relay.failed_events
SET replayed_at = replayed_at - make_interval(secs => $2) WHERE id = $1::uuid`, deadLetterID, d.Seconds())
	if err != nil {
		t.Fatalf("backdate replay: %v", err)
	}
}

func (tb *pgTable) LockTable(t *testing.T) func() {
	t.Helper()
	ctx := context.Background()
	tx, err := tb.h.pool.Begin(ctx)
	if err != nil {
		t.Fatal(err)
	}
	if _, err := tx.Exec(ctx, "LOCK TABLE "+tb.table.String()+" IN SHARE MODE"); err != nil {
		_ = tx.Rollback(ctx)
		t.Fatal(err)
	}
	var once sync.Once
	unlock := func() { once.Do(func() { _ = tx.Rollback(ctx) }) }
	t.Cleanup(unlock)
	return unlock
}

func (tb *pgTable) LockRow(t *testing.T, id string) func() {
	t.Helper()
	ctx := context.Background()
	tx, err := tb.h.pool.Begin(ctx)
	if err != nil {
		t.Fatal(err)
	}
	q := map[string]string{"status": "$1::uuid", "kafka-outbox": "$1::bigint", "delete": "$1::bigint"}[tb.preset]
	if _, err := tx.Exec(ctx, "SELECT 1 FROM "+tb.table.String()+" WHERE id = "+q+" FOR UPDATE", id); err != nil {
		_ = tx.Rollback(ctx)
		t.Fatal(err)
	}
	var once sync.Once
	unlock := func() { once.Do(func() { _ = tx.Rollback(ctx) }) }
	t.Cleanup(unlock)
	return unlock
}

func (tb *pgTable) DeleteRow(t *testing.T, id string) {
	t.Helper()
	q := map[string]string{"status": "$1::uuid", "kafka-outbox": "$1::bigint", "delete": "$1::bigint"}[tb.preset]
	if _, err := tb.h.pool.Exec(context.Background(), "DELETE FROM "+tb.table.String()+" WHERE id = "+q, id); err != nil {
		t.Fatalf("delete row: %v", err)
	}
}
