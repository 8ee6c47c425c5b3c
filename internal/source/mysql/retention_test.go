package mysql_test

import (
	"context"
	"crypto/rand"
	"database/sql"
	"errors"
	"fmt"
	"slices"
	"strconv"
	"testing"
	"time"

	"github.com/outbox-relay/outbox-relay/internal/layout"
	"github.com/outbox-relay/outbox-relay/internal/source"
	"github.com/outbox-relay/outbox-relay/internal/source/mysql"
)

const week = 7 * 24 * time.Hour

// retentionTable is one outbox shape for the retention tests.
type retentionTable struct {
	name, preset string
	over         layout.Spec
	ddl          string
	// insert adds one row and returns its id.
	insert func(t *testing.T, db *sql.DB, n int) string
	// created and published are the columns that date a row.
	created, published string
}

func uuid() string {
	var b [16]byte
	_, _ = rand.Read(b[:])
	return fmt.Sprintf("%x-%x-%x-%x-%x", b[0:4], b[4:6], b[6:8], b[8:10], b[10:])
}

func insertID(t *testing.T, db *sql.DB, q string, args ...any) string {
	t.Helper()
	res, err := db.ExecContext(context.Background(), q, args...)
	if err != nil {
		t.Fatalf("%s: %v", q, err)
	}
	id, err := res.LastInsertId()
	if err != nil {
		t.Fatal(err)
	}
	return strconv.FormatInt(id, 10)
}

var retentionTables = []retentionTable{
	{
		name: "published-flag", preset: "published-flag", ddl: journeys,
		insert: func(t *testing.T, db *sql.DB, n int) string {
			id := uuid()
			if _, err := db.ExecContext(context.Background(), `INSERT INTO outbox (id, aggregate_id, aggregate_type, event_type, payload, created_at)
VALUES (?, ?, 'journey', 'journey.created', JSON_OBJECT('n', ?), UTC_TIMESTAMP(6) + INTERVAL ? MICROSECOND)`, id, uuid(), n, n); err != nil {
				t.Fatal(err)
			}
			return id
		},
		created: "created_at", published: "published_at",
	},
	{
		name: "status", preset: "status",
		ddl: `CREATE TABLE outbox (
  id CHAR(36) NOT NULL PRIMARY KEY,
  aggregate_type VARCHAR(100) NOT NULL DEFAULT 'order',
  aggregate_id VARCHAR(100) NULL,
  event_type VARCHAR(100) NOT NULL DEFAULT 'order.created',
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
)`,
		insert: func(t *testing.T, db *sql.DB, n int) string {
			id := uuid()
			if _, err := db.ExecContext(context.Background(), `INSERT INTO outbox (id, aggregate_id, topic, payload, created_at)
VALUES (?, ?, 'orders', JSON_OBJECT('n', ?), UTC_TIMESTAMP(6) + INTERVAL ? MICROSECOND)`, id, uuid(), n, n); err != nil {
				t.Fatal(err)
			}
			return id
		},
		created: "created_at", published: "published_at",
	},
	{
		name: "kafka-outbox", preset: "kafka-outbox", ddl: kafkaOutbox,
		insert: func(t *testing.T, db *sql.DB, n int) string {
			return insertID(t, db, "INSERT INTO kafka_outbox (topic, payload_json, `key`) VALUES ('orders', JSON_OBJECT('n', ?), ?)", n, "k"+strconv.Itoa(n))
		},
		created: "created_at", published: "push_completed_at",
	},
	{
		// A published timestamp and nothing else: a dead letter sets it
		// too, and only failed_events tells it from a delivered row.
		name: "custom-timestamp",
		over: layout.Spec{ID: "id", Payload: "payload", Topic: "{topic}", CreatedAt: "created_at",
			State: layout.State{Mode: "timestamp", PublishedAt: []string{"sent_at"}}},
		ddl: `CREATE TABLE events (id BIGINT NOT NULL AUTO_INCREMENT PRIMARY KEY, topic VARCHAR(100) NOT NULL, payload JSON NOT NULL,
  created_at DATETIME(6) NOT NULL DEFAULT CURRENT_TIMESTAMP(6), sent_at DATETIME(6) NULL, KEY idx_sent (sent_at))`,
		insert: func(t *testing.T, db *sql.DB, n int) string {
			return insertID(t, db, "INSERT INTO events (topic, payload) VALUES ('orders', JSON_OBJECT('n', ?))", n)
		},
		created: "created_at", published: "sent_at",
	},
	{
		// A flag and binary ids: the open dead letters tell dead rows apart.
		name: "custom-flag-binary",
		over: layout.Spec{ID: "id", Payload: "payload", Topic: "{topic}", CreatedAt: "created_at",
			State: layout.State{Mode: "flag", Flag: "done"}},
		ddl: `CREATE TABLE jobs (id BINARY(16) NOT NULL PRIMARY KEY, topic VARCHAR(100) NOT NULL, payload JSON NOT NULL,
  created_at DATETIME(6) NOT NULL DEFAULT CURRENT_TIMESTAMP(6), done BOOLEAN NOT NULL DEFAULT FALSE, KEY idx_done (done))`,
		insert: func(t *testing.T, db *sql.DB, n int) string {
			var id string
			if err := db.QueryRowContext(context.Background(), "SELECT LOWER(HEX(RANDOM_BYTES(16)))").Scan(&id); err != nil {
				t.Fatal(err)
			}
			if _, err := db.ExecContext(context.Background(), "INSERT INTO jobs (id, topic, payload, created_at) VALUES (UNHEX(?), 'orders', JSON_OBJECT('n', ?), UTC_TIMESTAMP(6) + INTERVAL ? MICROSECOND)", id, n, n); err != nil {
				t.Fatal(err)
			}
			return id
		},
		created: "created_at",
	},
}

// table is the name the DDL creates.
func (rt retentionTable) table() string {
	switch rt.name {
	case "kafka-outbox":
		return "kafka_outbox"
	case "custom-timestamp":
		return "events"
	case "custom-flag-binary":
		return "jobs"
	}
	return "outbox"
}

func (rt retentionTable) idText() string {
	if rt.name == "custom-flag-binary" {
		return "LOWER(HEX(id))"
	}
	return "CAST(id AS CHAR)"
}

func (rt retentionTable) fill(t *testing.T, e *env, n int) []string {
	t.Helper()
	ids := make([]string, n)
	for i := range ids {
		ids[i] = rt.insert(t, e.db, i)
	}
	return ids
}

// age moves the given rows' dates back by d.
func (rt retentionTable) age(t *testing.T, e *env, d time.Duration, ids ...string) {
	t.Helper()
	set := "`" + rt.created + "` = `" + rt.created + "` - INTERVAL ? MICROSECOND"
	args := []any{d.Microseconds()}
	if rt.published != "" {
		set += ", `" + rt.published + "` = `" + rt.published + "` - INTERVAL ? MICROSECOND"
		args = append(args, d.Microseconds())
	}
	for _, id := range ids {
		if _, err := e.db.ExecContext(context.Background(), "UPDATE "+rt.table()+" SET "+set+" WHERE "+rt.idText()+" = ?", append(args, id)...); err != nil {
			t.Fatal(err)
		}
	}
}

// remaining lists the ids left in the table, sorted.
func (rt retentionTable) remaining(t *testing.T, e *env) []string {
	t.Helper()
	rows, err := e.db.QueryContext(context.Background(), "SELECT "+rt.idText()+" FROM "+rt.table())
	if err != nil {
		t.Fatal(err)
	}
	defer rows.Close()
	var ids []string
	for rows.Next() {
		var id string
		if err := rows.Scan(&id); err != nil {
			t.Fatal(err)
		}
		ids = append(ids, id)
	}
	if err := rows.Err(); err != nil {
		t.Fatal(err)
	}
	slices.Sort(ids)
	return ids
}

func sorted(ids ...string) []string {
	out := slices.Clone(ids)
	slices.Sort(out)
	return out
}

// settle claims every pending row and records the outcome the relay
// records: the rows in published are delivered, those in dead
// dead-lettered, those in retry back off; the rest stay pending.
func settle(t *testing.T, st *mysql.Store, published, dead, retry []string) {
	t.Helper()
	ctx := context.Background()
	b, err := st.Claim(ctx, 1000)
	if err != nil || b == nil {
		t.Fatalf("claim: %v %v", b, err)
	}
	var o source.Outcome
	for i, r := range b.Rows() {
		switch {
		case slices.Contains(published, r.ID):
			o.Published = append(o.Published, i)
		case slices.Contains(dead, r.ID):
			o.Dead = append(o.Dead, source.Dead{Index: i, Attempts: 1, Reason: "rejected", PayloadIsJSON: true})
		case slices.Contains(retry, r.ID):
			o.Retry = append(o.Retry, source.Retry{Index: i, Attempts: 1, At: time.Now().Add(time.Hour), Err: "broker down"})
		}
	}
	if got := len(o.Published) + len(o.Dead) + len(o.Retry); got != len(published)+len(dead)+len(retry) {
		t.Fatalf("claimed %d of the rows to settle, want %d", got, len(published)+len(dead)+len(retry))
	}
	if err := b.Complete(ctx, o); err != nil {
		t.Fatal(err)
	}
}

func purgeParams(e *env, l *layout.Layout, table string) mysql.PurgeParams {
	return mysql.PurgeParams{Source: "src", Table: mysql.Table{Name: table}, RelayDatabase: e.relayDB, Layout: l, PurgeOptions: source.PurgeOptions{OlderThan: week, BatchSize: 2}}
}

// TestPurgeLayouts: for every layout that keeps settled rows, Purge deletes
// the delivered rows older than the age and, only when asked, the old dead
// letters; pending rows (old or not, backing off or not), newer settled
// rows and the dead letters' records stay. A dry run deletes nothing.
func TestPurgeLayouts(t *testing.T) {
	t.Parallel()
	for _, rt := range retentionTables {
		t.Run(rt.name, func(t *testing.T) {
			t.Parallel()
			ctx := context.Background()
			e := newEnv(t)
			e.exec(t, rt.ddl)
			st, l := e.store(t, e.db, "src", rt.table(), rt.preset, rt.over, false)
			rows := rt.fill(t, e, 6)
			oldPub, newPub, oldDead, newDead, oldPending, oldRetry := rows[0], rows[1], rows[2], rows[3], rows[4], rows[5]
			settle(t, st, []string{oldPub, newPub}, []string{oldDead, newDead}, []string{oldRetry})
			rt.age(t, e, 30*24*time.Hour, oldPub, oldDead, oldPending, oldRetry)

			p := purgeParams(e, l, rt.table())
			p.IncludeDead, p.DryRun = true, true
			res, err := mysql.Purge(ctx, e.db, p)
			if err != nil {
				t.Fatal(err)
			}
			if res.Published != 1 || res.Dead != 1 {
				t.Errorf("dry run counted %d delivered and %d dead, want 1 and 1", res.Published, res.Dead)
			}
			if got := rt.remaining(t, e); len(got) != 6 {
				t.Fatalf("dry run deleted rows: %d left", len(got))
			}

			p.DryRun, p.IncludeDead = false, false
			if res, err = mysql.Purge(ctx, e.db, p); err != nil {
				t.Fatal(err)
			}
			if res.Published != 1 || res.Dead != 0 {
				t.Errorf("purge deleted %d delivered and %d dead, want 1 and 0", res.Published, res.Dead)
			}
			if got, want := rt.remaining(t, e), sorted(newPub, oldDead, newDead, oldPending, oldRetry); !slices.Equal(got, want) {
				t.Fatalf("after purge: %v, want %v", got, want)
			}

			p.IncludeDead = true
			if res, err = mysql.Purge(ctx, e.db, p); err != nil {
				t.Fatal(err)
			}
			if res.Published != 0 || res.Dead != 1 {
				t.Errorf("purge with dead letters deleted %d delivered and %d dead, want 0 and 1", res.Published, res.Dead)
			}
			if got, want := rt.remaining(t, e), sorted(newPub, newDead, oldPending, oldRetry); !slices.Equal(got, want) {
				t.Fatalf("after purge with dead letters: %v, want %v", got, want)
			}
			// The dead letters' records stay, and so does the retry
			// state of the row that is backing off.
			if n := queryInt(t, e.db, "SELECT COUNT(*) FROM "+e.relayDB+".failed_events WHERE replayed_at IS NULL"); n != 2 {
				t.Errorf("%d open dead letters, want 2", n)
			}
			if n := queryInt(t, e.db, "SELECT COUNT(*) FROM "+e.relayDB+".retry_state WHERE event_id = ?", oldRetry); n != 1 {
				t.Error("the retry state of a pending row was deleted")
			}
			// The old pending row is still pending: the relay claims it.
			b, err := st.Claim(ctx, 10)
			if err != nil || b == nil {
				t.Fatalf("claim after purge: %v %v", b, err)
			}
			defer func() { _ = b.Release(ctx) }()
			if got := ids(b.Rows()); !slices.Equal(got, []string{oldPending}) {
				t.Errorf("claim after purge got %v, want the old pending row %s", got, oldPending)
			}
		})
	}
}

// TestPurgeNoAge: a layout with no column that dates its rows is refused.
func TestPurgeNoAge(t *testing.T) {
	t.Parallel()
	e := newEnv(t)
	e.exec(t, "CREATE TABLE ev (id BIGINT NOT NULL AUTO_INCREMENT PRIMARY KEY, topic VARCHAR(100) NOT NULL, payload JSON NOT NULL, done BOOLEAN NOT NULL DEFAULT FALSE)")
	_, l := e.store(t, e.db, "ev", "ev", "", layout.Spec{ID: "id", Payload: "payload", Topic: "{topic}",
		State: layout.State{Mode: "flag", Flag: "done"}}, true)
	_, err := mysql.Purge(context.Background(), e.db, mysql.PurgeParams{Source: "ev", Table: mysql.Table{Name: "ev"}, RelayDatabase: e.relayDB, Layout: l})
	if !errors.Is(err, mysql.ErrNoAge) {
		t.Errorf("purge without a date column: %v, want ErrNoAge", err)
	}
}
