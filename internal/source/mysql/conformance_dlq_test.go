package mysql

import (
	"context"
	"sync"
	"testing"
	"time"

	"github.com/outbox-relay/outbox-relay/internal/source"
)

// The dead-letter and retention side of the conformance harness.

func (tb *myTable) ListFailed(t *testing.T, f source.DLQFilter) []source.FailedEvent {
	t.Helper()
	evs, err := ListFailed(context.Background(), tb.h.db, tb.h.relayDB, f)
	if err != nil {
		t.Fatal(err)
	}
	return evs
}

func (tb *myTable) PurgeDead(t *testing.T, ids []string, actor string) int {
	t.Helper()
	n, err := PurgeDead(context.Background(), tb.h.db, tb.h.relayDB, ids, actor)
	if err != nil {
		t.Fatal(err)
	}
	return n
}

func (tb *myTable) Purge(t *testing.T, src string, o source.PurgeOptions) (source.PurgeResult, error) {
	t.Helper()
	return Purge(context.Background(), tb.h.db, PurgeParams{Source: src, Table: tb.table, RelayDatabase: tb.h.relayDB, Layout: tb.layout, PurgeOptions: o})
}

func (tb *myTable) Audit(t *testing.T, deadLetterID string) []string {
	t.Helper()
	rows, err := tb.h.db.QueryContext(context.Background(), "SELECT action FROM "+QuoteIdent(tb.h.relayDB)+
		".failed_event_audit WHERE failed_event_id = CAST(? AS UNSIGNED) ORDER BY id", deadLetterID)
	if err != nil {
		t.Fatal(err)
	}
	defer rows.Close()
	var out []string
	for rows.Next() {
		var a string
		if err := rows.Scan(&a); err != nil {
			t.Fatal(err)
		}
		out = append(out, a)
	}
	if err := rows.Err(); err != nil {
		t.Fatal(err)
	}
	return out
}

func (tb *myTable) Backdate(t *testing.T, id string, d time.Duration) {
	t.Helper()
	var q string
	switch tb.preset {
	case "delete":
		return
	case "status":
		q = "UPDATE " + tb.table.String() + " SET created_at = created_at - INTERVAL ? MICROSECOND, " +
			"published_at = published_at - INTERVAL ? MICROSECOND WHERE id = ?"
	case "kafka-outbox":
		q = "UPDATE " + tb.table.String() + " SET created_at = created_at - INTERVAL ? MICROSECOND, " +
			"push_completed_at = push_completed_at - INTERVAL ? MICROSECOND WHERE id = CAST(? AS UNSIGNED)"
	}
	if _, err := tb.h.db.ExecContext(context.Background(), q, d.Microseconds(), d.Microseconds(), id); err != nil {
		t.Fatalf("backdate: %v", err)
	}
}

func (tb *myTable) BackdateReplay(t *testing.T, deadLetterID string, d time.Duration) {
	t.Helper()
	_, err := tb.h.db.ExecContext(context.Background(), "UPDATE "+QuoteIdent(tb.h.relayDB)+
		".failed_events SET replayed_at = replayed_at - INTERVAL ? MICROSECOND WHERE id = CAST(? AS UNSIGNED)", d.Microseconds(), deadLetterID)
	if err != nil {
		t.Fatalf("backdate replay: %v", err)
	}
}

func (tb *myTable) LockTable(t *testing.T) func() {
	t.Helper()
	ctx := context.Background()
	conn, err := tb.h.db.Conn(ctx)
	if err != nil {
		t.Fatal(err)
	}
	if _, err := conn.ExecContext(ctx, "LOCK TABLES "+tb.table.String()+" READ"); err != nil {
		_ = conn.Close()
		t.Fatal(err)
	}
	var once sync.Once
	unlock := func() {
		once.Do(func() {
			_, _ = conn.ExecContext(ctx, "UNLOCK TABLES")
			_ = conn.Close()
		})
	}
	t.Cleanup(unlock)
	return unlock
}

func (tb *myTable) LockRow(t *testing.T, id string) func() {
	t.Helper()
	ctx := context.Background()
	tx, err := tb.h.db.BeginTx(ctx, nil)
	if err != nil {
		t.Fatal(err)
	}
	if _, err := tx.ExecContext(ctx, "SELECT id FROM "+tb.table.String()+" WHERE id = ? FOR UPDATE", id); err != nil {
		_ = tx.Rollback()
		t.Fatal(err)
	}
	var once sync.Once
	unlock := func() { once.Do(func() { _ = tx.Rollback() }) }
	t.Cleanup(unlock)
	return unlock
}

func (tb *myTable) DeleteRow(t *testing.T, id string) {
	t.Helper()
	if _, err := tb.h.db.ExecContext(context.Background(), "DELETE FROM "+tb.table.String()+" WHERE id = ?", id); err != nil {
		t.Fatalf("delete row: %v", err)
	}
}
