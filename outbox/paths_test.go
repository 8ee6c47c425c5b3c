package outbox_test

import (
	"context"
	"database/sql"
	"testing"

	_ "github.com/go-sql-driver/mysql"
	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgxpool"

	"github.com/outbox-relay/outbox-relay/internal/mytest"
	"github.com/outbox-relay/outbox-relay/internal/pgtest"
	"github.com/outbox-relay/outbox-relay/outbox"
)

// TestWriteMariaDB: on MariaDB through database/sql, an AUTO_INCREMENT id
// comes back from the insert, and an idempotency key already written
// returns the first row without a second.
func TestWriteMariaDB(t *testing.T) {
	ctx := context.Background()
	_, dsn := mytest.NewDatabase(t, "outboxlib")
	db, err := sql.Open("mysql", dsn)
	if err != nil {
		t.Fatal(err)
	}
	defer db.Close()
	mytest.Exec(t, db, "CREATE TABLE outbox (id BIGINT AUTO_INCREMENT PRIMARY KEY, topic VARCHAR(100) NOT NULL, "+
		"`key` VARCHAR(100) NOT NULL, payload JSON NOT NULL, request_id VARCHAR(100) NOT NULL, UNIQUE KEY (request_id))")
	l := outbox.Presets["delete"]
	l.Idempotency, l.IdempotencyKey = []string{"request_id"}, "request_id"
	w := outbox.New(outbox.MySQL, l)
	write := func(req string) string {
		tx, err := db.BeginTx(ctx, nil)
		if err != nil {
			t.Fatal(err)
		}
		id, err := w.Write(ctx, tx, outbox.Event{Topic: "orders", Key: "k1", Payload: map[string]int{"n": 1}, IdempotencyKey: req})
		if err != nil {
			t.Fatal(err)
		}
		if err := tx.Commit(); err != nil {
			t.Fatal(err)
		}
		return id
	}
	a, b, again := write("r1"), write("r2"), write("r1")
	if a == "" || a == b || again != a {
		t.Errorf("ids %q, %q and again %q: want two ids, the first returned again", a, b, again)
	}
	var n int
	_ = db.QueryRowContext(ctx, "SELECT COUNT(*) FROM outbox").Scan(&n)
	if n != 2 {
		t.Errorf("%d rows, want 2", n)
	}
}

// TestWritePgx: the pgx path writes the same row as database/sql's, its
// UUIDv7 id returned.
func TestWritePgx(t *testing.T) {
	ctx := context.Background()
	dsn, drop, err := pgtest.TempDatabase(`CREATE TABLE outbox (id UUID PRIMARY KEY, topic TEXT NOT NULL, key TEXT NOT NULL, payload JSONB NOT NULL)`)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(drop)
	pool, err := pgxpool.New(ctx, dsn)
	if err != nil {
		t.Fatal(err)
	}
	defer pool.Close()
	l := outbox.Presets["delete"]
	l.GenerateID = true
	w := outbox.New(outbox.Postgres, l)
	var id string
	err = pgx.BeginFunc(ctx, pool, func(tx pgx.Tx) error {
		id, err = w.WritePgx(ctx, tx, outbox.Event{Topic: "orders", Key: "k1", Payload: []byte(`{"n": 1}`)})
		return err
	})
	if err != nil {
		t.Fatal(err)
	}
	var version int
	if err := pool.QueryRow(ctx, "SELECT get_byte(uuid_send(id), 6) >> 4 FROM outbox WHERE id = $1::uuid AND payload = '{\"n\": 1}'", id).Scan(&version); err != nil || version != 7 {
		t.Errorf("row %s: uuid version %d (%v), want the written row with a UUIDv7", id, version, err)
	}
}
