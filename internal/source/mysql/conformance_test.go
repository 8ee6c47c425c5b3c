package mysql

import (
	"context"
	"database/sql"
	"errors"
	"fmt"
	"testing"
	"time"

	"github.com/outbox-relay/outbox-relay/internal/layout"
	"github.com/outbox-relay/outbox-relay/internal/mytest"
	"github.com/outbox-relay/outbox-relay/internal/source"
	"github.com/outbox-relay/outbox-relay/internal/source/sourcetest"
)

// TestConformance runs the store conformance suite on MySQL/MariaDB.
func TestConformance(t *testing.T) {
	t.Parallel()
	_, dsn := mytest.NewDatabase(t, "outbox_test")
	relayDB := "outbox_relay_" + mytest.Suffix()
	t.Cleanup(func() { mytest.Drop(t, relayDB) })
	m, err := NewMigrator(dsn, relayDB)
	if err != nil {
		t.Fatal(err)
	}
	defer m.Close()
	if err := m.Up(context.Background()); err != nil {
		t.Fatal(err)
	}
	db, err := Open(dsn)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = db.Close() })
	sourcetest.Run(t, &myHarness{dsn: dsn, db: db, relayDB: relayDB})
}

// myHarness makes each table with a name of its own in one database.
type myHarness struct {
	dsn     string
	db      *sql.DB
	relayDB string
}

func (h *myHarness) Presets() []string { return []string{"delete", "status", "kafka-outbox"} }

// The tables of the presets, with every column each preset names;
// created_at has microseconds so that rows sort in insertion order.
const (
	deleteTable = `CREATE TABLE %s (
  id BIGINT UNSIGNED NOT NULL AUTO_INCREMENT PRIMARY KEY,
  topic VARCHAR(255) NULL,
  ` + "`key`" + ` VARCHAR(255) NULL,
  payload JSON NOT NULL
)`
	statusTable = `CREATE TABLE %s (
  id CHAR(36) NOT NULL PRIMARY KEY,
  aggregate_type VARCHAR(100) NOT NULL DEFAULT 'Test',
  aggregate_id VARCHAR(100) NULL,
  event_type VARCHAR(100) NOT NULL DEFAULT 'test.event',
  topic VARCHAR(100) NOT NULL,
  partition_key VARCHAR(100) NULL,
  payload JSON NOT NULL,
  headers JSON NULL,
  status ENUM('pending', 'published', 'failed') NOT NULL DEFAULT 'pending',
  retry_count SMALLINT NOT NULL DEFAULT 0,
  max_retries SMALLINT NOT NULL DEFAULT 5,
  published_at DATETIME(6) NULL,
  created_at DATETIME(6) NOT NULL DEFAULT CURRENT_TIMESTAMP(6),
  KEY idx_pending (status, created_at)
)`
)

func (h *myHarness) NewTable(t *testing.T, preset string) sourcetest.Table {
	t.Helper()
	ctx := context.Background()
	tbl := Table{Name: "outbox_" + mytest.Suffix()}
	switch preset {
	case "delete":
		mytest.Exec(t, h.db, fmt.Sprintf(deleteTable, tbl))
	case "status":
		mytest.Exec(t, h.db, fmt.Sprintf(statusTable, tbl))
	case "kafka-outbox":
		// The relay's own migrations make it, as in production; a name of
		// its own keeps the tables of parallel tests apart.
		tbl.Name = "kafka_outbox_" + mytest.Suffix()
		if err := MigrateTable(ctx, h.dsn, tbl); err != nil {
			t.Fatal(err)
		}
	default:
		t.Fatalf("no table for preset %q", preset)
	}
	merged, explicit, err := layout.Merge(preset, layout.Spec{}, "")
	if err != nil {
		t.Fatal(err)
	}
	cols, err := Columns(ctx, h.db, tbl)
	if err != nil {
		t.Fatal(err)
	}
	l, err := layout.Resolve(merged, explicit, tbl.String(), cols)
	if err != nil {
		t.Fatal(err)
	}
	return &myTable{h: h, preset: preset, table: tbl, layout: l}
}

type myTable struct {
	h      *myHarness
	preset string
	table  Table
	layout *layout.Layout
}

func (tb *myTable) Open(t *testing.T, o sourcetest.Options) sourcetest.Store {
	t.Helper()
	owner := "sourcetest " + mytest.Suffix()
	// The claim timeout is the store's (Options.ClaimTimeout), not the
	// pool's: each claim sets its connection's wait_timeout.
	db, err := OpenWith(tb.h.dsn, ConnOptions{Owner: owner})
	if err != nil {
		t.Fatal(err)
	}
	db.SetMaxOpenConns(4)
	s := &myStore{
		Store: New(db, Options{Source: o.Source, Table: tb.table, RelayDatabase: tb.h.relayDB, Layout: tb.layout, Ordering: o.Ordering,
			ClaimTimeout: o.ClaimTimeout, Bucket: o.Bucket, Priority: o.Priority}),
		admin: tb.h.db, owner: owner,
	}
	t.Cleanup(func() {
		// A batch a failed test left open would keep Close waiting: cut
		// the connections first and close in the background.
		_ = s.kill(context.Background())
		go db.Close()
	})
	return s
}

// myStore is a store whose connections are marked with a unique owner, by
// which Kill finds them.
type myStore struct {
	*Store
	admin *sql.DB
	owner string
}

func (s *myStore) kill(ctx context.Context) error {
	rows, err := s.admin.QueryContext(ctx, "SELECT ID FROM information_schema.PROCESSLIST WHERE IS_USED_LOCK(CONCAT(?, ID)) = ID",
		ownerConnPrefix(s.owner))
	if err != nil {
		return err
	}
	var conns []int64
	for rows.Next() {
		var id int64
		if err := rows.Scan(&id); err != nil {
			_ = rows.Close()
			return err
		}
		conns = append(conns, id)
	}
	_ = rows.Close()
	for _, id := range conns {
		if _, err := s.admin.ExecContext(ctx, fmt.Sprintf("KILL CONNECTION %d", id)); err != nil {
			return err
		}
	}
	return nil
}

func (s *myStore) Kill(t *testing.T) {
	t.Helper()
	if err := s.kill(context.Background()); err != nil {
		t.Fatalf("kill connections: %v", err)
	}
}

func (tb *myTable) Insert(t *testing.T, rows ...sourcetest.Row) []string {
	t.Helper()
	ctx := context.Background()
	ids := make([]string, len(rows))
	for i, r := range rows {
		switch tb.preset {
		case "delete":
			res, err := tb.h.db.ExecContext(ctx, "INSERT INTO "+tb.table.String()+" (topic, `key`, payload) VALUES (?, NULLIF(?, ''), ?)",
				r.Topic, r.Key, r.Payload)
			if err != nil {
				t.Fatalf("insert: %v", err)
			}
			id, err := res.LastInsertId()
			if err != nil {
				t.Fatal(err)
			}
			ids[i] = fmt.Sprint(id)
		case "kafka-outbox":
			res, err := tb.h.db.ExecContext(ctx, "INSERT INTO "+tb.table.String()+
				" (topic, `key`, partition_key, payload_json, payload_headers) VALUES (?, ?, ?, ?, ?)",
				r.Topic, r.Key, r.PartitionKey, r.Payload, r.Headers)
			if err != nil {
				t.Fatalf("insert: %v", err)
			}
			id, err := res.LastInsertId()
			if err != nil {
				t.Fatal(err)
			}
			ids[i] = fmt.Sprint(id)
		case "status":
			if err := tb.h.db.QueryRowContext(ctx, "SELECT UUID()").Scan(&ids[i]); err != nil {
				t.Fatal(err)
			}
			_, err := tb.h.db.ExecContext(ctx, "INSERT INTO "+tb.table.String()+
				" (id, topic, aggregate_id, partition_key, payload, headers) VALUES (?, ?, NULLIF(?, ''), NULLIF(?, ''), ?, NULLIF(?, ''))",
				ids[i], r.Topic, r.Key, r.PartitionKey, r.Payload, r.Headers)
			if err != nil {
				t.Fatalf("insert: %v", err)
			}
		}
	}
	return ids
}

func (tb *myTable) State(t *testing.T, id string) sourcetest.RowState {
	t.Helper()
	var q string
	switch tb.preset {
	case "delete":
		q = "SELECT TRUE, FALSE, FALSE, 0, '', '', NULL FROM " + tb.table.String() + " WHERE id = CAST(? AS UNSIGNED)"
	case "status":
		q = "SELECT status = 'pending', status = 'published' AND published_at IS NOT NULL, status = 'failed', retry_count, '', '', NULL FROM " +
			tb.table.String() + " WHERE id = ?"
	case "kafka-outbox":
		q = "SELECT push_completed_at IS NULL AND errored = 0, push_completed_at IS NOT NULL, errored = 1, push_attempts, error_reason, " +
			"COALESCE(batch_id, ''), push_started_at FROM " + tb.table.String() + " WHERE id = CAST(? AS UNSIGNED)"
	}
	st := sourcetest.RowState{Exists: true}
	var claimed sql.NullTime
	err := tb.h.db.QueryRowContext(context.Background(), q, id).
		Scan(&st.Pending, &st.Published, &st.Failed, &st.Attempts, &st.Error, &st.BatchID, &claimed)
	if errors.Is(err, sql.ErrNoRows) {
		return sourcetest.RowState{}
	}
	if err != nil {
		t.Fatalf("row state: %v", err)
	}
	st.ClaimedAt = claimed.Time
	return st
}

func (tb *myTable) DeadLetters(t *testing.T, id string) []sourcetest.DeadLetter {
	t.Helper()
	rows, err := tb.h.db.QueryContext(context.Background(), "SELECT failure_reason, failure_count FROM "+QuoteIdent(tb.h.relayDB)+
		".failed_events WHERE source_table = ? AND original_event_id = ? ORDER BY created_at, id", tb.table.Name, id)
	if err != nil {
		t.Fatal(err)
	}
	defer rows.Close()
	var out []sourcetest.DeadLetter
	for rows.Next() {
		var d sourcetest.DeadLetter
		if err := rows.Scan(&d.Reason, &d.Attempts); err != nil {
			t.Fatal(err)
		}
		out = append(out, d)
	}
	return out
}

func (tb *myTable) Totals(t *testing.T, src string) source.Stats {
	t.Helper()
	var s source.Stats
	err := tb.h.db.QueryRowContext(context.Background(), "SELECT total_events_published, total_events_retried, total_events_dead_lettered, "+
		"COALESCE(last_published_event_id, '') FROM "+QuoteIdent(tb.h.relayDB)+".relay_state WHERE source = ?", src).
		Scan(&s.Published, &s.Retried, &s.DeadLettered, &s.LastPublishedID)
	if err != nil && !errors.Is(err, sql.ErrNoRows) {
		t.Fatal(err)
	}
	return s
}

// ClaimElsewhere marks the row as the original relay does when it claims
// it: a batch id and the claim time (UTC), push_completed_at still NULL.
func (tb *myTable) ClaimElsewhere(t *testing.T, id string, at time.Time) {
	t.Helper()
	_, err := tb.h.db.ExecContext(context.Background(), "UPDATE "+tb.table.String()+
		" SET batch_id = UUID(), push_started_at = ? WHERE id = CAST(? AS UNSIGNED)", at.UTC(), id)
	if err != nil {
		t.Fatal(err)
	}
}
