package outbox_test

import (
	"context"
	"database/sql"
	"slices"
	"sync"
	"testing"

	_ "github.com/go-sql-driver/mysql"
	"github.com/jackc/pgx/v5"

	"github.com/outbox-relay/outbox-relay/internal/fixtures"
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
	_, pool := pgtest.NewDB(t)
	pgtest.Exec(t, pool, `CREATE TABLE outbox (id UUID PRIMARY KEY, topic TEXT NOT NULL, key TEXT NOT NULL, payload JSONB NOT NULL)`)
	l := outbox.Presets["delete"]
	l.GenerateID = true
	w := outbox.New(outbox.Postgres, l)
	var id string
	err := pgx.BeginFunc(ctx, pool, func(tx pgx.Tx) (err error) {
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

// TestCreatedAtInWriteOrder: events written in one transaction get
// created_at in the order they were written (the clock's time, not the
// transaction's start), so a relay ordering by created_at keeps them in
// that order.
func TestCreatedAtInWriteOrder(t *testing.T) {
	ctx := context.Background()
	_, pool := pgtest.NewDB(t)
	pgtest.Exec(t, pool, fixtures.Seed001)
	w := outbox.New(outbox.Postgres, outbox.Presets["status"])
	var ids []string
	err := pgx.BeginFunc(ctx, pool, func(tx pgx.Tx) error {
		for i := range 20 {
			id, err := w.WritePgx(ctx, tx, outbox.Event{Type: "order.placed", AggregateType: "Order",
				AggregateID: "9b2e3c1a-5f4d-4c2b-8a7e-1d2c3b4a5f60", Topic: "orders", Payload: map[string]int{"n": i}})
			if err != nil {
				return err
			}
			ids = append(ids, id)
		}
		return nil
	})
	if err != nil {
		t.Fatal(err)
	}
	rows, err := pool.Query(ctx, "SELECT id::text FROM outbox ORDER BY created_at")
	if err != nil {
		t.Fatal(err)
	}
	got, err := pgx.CollectRows(rows, pgx.RowTo[string])
	if err != nil {
		t.Fatal(err)
	}
	var distinct int
	if err := pool.QueryRow(ctx, "SELECT count(DISTINCT created_at) FROM outbox").Scan(&distinct); err != nil {
		t.Fatal(err)
	}
	if distinct != len(ids) || !slices.Equal(got, ids) {
		t.Errorf("%d distinct created_at for %d events; by created_at %v, written %v", distinct, len(ids), got, ids)
	}
}

// TestWriteSequencedMariaDB: seed 003's per-participant sequence on
// MariaDB: eight writers of one instruction at once get one row, its
// AUTO_INCREMENT id, and the numbers the other seven drew are given back
// (the savepoint), so the sequence goes 1, 2, 3 without a gap.
func TestWriteSequencedMariaDB(t *testing.T) {
	ctx := context.Background()
	_, dsn := mytest.NewDatabase(t, "outboxseq")
	db, err := sql.Open("mysql", dsn)
	if err != nil {
		t.Fatal(err)
	}
	defer db.Close()
	mytest.Exec(t, db, "CREATE TABLE participant_seq (participant VARCHAR(100) PRIMARY KEY, last BIGINT NOT NULL)")
	mytest.Exec(t, db, `CREATE FUNCTION bump_seq(p VARCHAR(100)) RETURNS BIGINT MODIFIES SQL DATA
BEGIN
  INSERT INTO participant_seq VALUES (p, 1) ON DUPLICATE KEY UPDATE last = last + 1;
  RETURN (SELECT last FROM participant_seq WHERE participant = p);
END`)
	mytest.Exec(t, db, "CREATE TABLE payments (id BIGINT AUTO_INCREMENT PRIMARY KEY, participant VARCHAR(100) NOT NULL, "+
		"seq BIGINT NOT NULL, instruction_id VARCHAR(100) NOT NULL, idempotency_key VARCHAR(100) NOT NULL, payload JSON NOT NULL, "+
		"created_at DATETIME(6) NOT NULL, UNIQUE KEY (instruction_id, idempotency_key), UNIQUE KEY (participant, seq))")
	w := outbox.New(outbox.MySQL, outbox.Layout{Table: "payments", ID: "id", Payload: "payload", CreatedAt: "created_at",
		Idempotency: []string{"instruction_id", "idempotency_key"}, IdempotencyKey: "idempotency_key"})
	seq := outbox.Sequence{Function: "bump_seq", Participant: "participant", Column: "seq"}
	write := func(instruction string) (string, error) {
		tx, err := db.BeginTx(ctx, nil)
		if err != nil {
			return "", err
		}
		defer func() { _ = tx.Rollback() }()
		id, err := w.WriteSequenced(ctx, tx, outbox.Event{Payload: map[string]string{"instruction": instruction},
			IdempotencyKey: "idem-" + instruction, Columns: map[string]any{"participant": "p1", "instruction_id": instruction}}, seq)
		if err != nil {
			return "", err
		}
		return id, tx.Commit()
	}
	if _, err := write("i1"); err != nil {
		t.Fatal(err)
	}
	var wg sync.WaitGroup
	ids, errs := make([]string, 8), make([]error, 8)
	for g := range 8 { // one instruction, eight writers at once
		wg.Go(func() { ids[g], errs[g] = write("i2") })
	}
	wg.Wait()
	for g := range 8 {
		if errs[g] != nil || ids[g] == "" || ids[g] != ids[0] {
			t.Fatalf("writer %d of i2: %q, %v; want one row for all", g, ids[g], errs[g])
		}
	}
	if _, err := write("i3"); err != nil {
		t.Fatal(err)
	}
	rows, err := db.QueryContext(ctx, "SELECT seq FROM payments ORDER BY seq")
	if err != nil {
		t.Fatal(err)
	}
	defer rows.Close()
	var seqs []int
	for rows.Next() {
		var n int
		if err := rows.Scan(&n); err != nil {
			t.Fatal(err)
		}
		seqs = append(seqs, n)
	}
	if !slices.Equal(seqs, []int{1, 2, 3}) {
		t.Errorf("sequences %v, want 1, 2, 3", seqs)
	}
}
