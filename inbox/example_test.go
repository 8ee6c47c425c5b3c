package inbox_test

import (
	"context"
	"database/sql"
	"fmt"

	_ "github.com/jackc/pgx/v5/stdlib"

	"github.com/outbox-relay/outbox-relay/inbox"
	"github.com/outbox-relay/outbox-relay/internal/pgtest"
)

// A consumer of seed 001's events records each one in processed_events
// with its own work: the second delivery of an event is skipped.
func ExampleInbox_Process() {
	ctx := context.Background()
	db, err := sql.Open("pgx", exampleDSN())
	if err != nil {
		panic(err)
	}
	defer db.Close()
	in := inbox.New(inbox.Postgres, inbox.ProcessedEvents, "wallet-service", 0)
	credit := func(ctx context.Context, tx *sql.Tx) error {
		_, err := tx.ExecContext(ctx, "UPDATE wallets SET balance = balance + 10 WHERE id = 1")
		return err
	}
	for range 2 { // the same event delivered twice
		ran, err := in.Process(ctx, db, "9b2e3c1a-5f4d-4c2b-8a7e-1d2c3b4a5f60", credit)
		fmt.Println("processed:", ran, err)
	}
	var balance int
	_ = db.QueryRowContext(ctx, "SELECT balance FROM wallets WHERE id = 1").Scan(&balance)
	fmt.Println("balance:", balance)
	// Output:
	// processed: true <nil>
	// processed: false <nil>
	// balance: 10
}

// exampleDSN is a fresh database with seed 001's processed_events and a
// wallets table, on the local PostgreSQL.
func exampleDSN() string {
	dsn, cleanup, err := pgtest.TempDatabase(`CREATE TABLE processed_events (
  event_id UUID PRIMARY KEY,
  consumer_group VARCHAR(100) NOT NULL,
  processed_at TIMESTAMPTZ NOT NULL DEFAULT NOW(),
  expires_at TIMESTAMPTZ NOT NULL DEFAULT (NOW() + INTERVAL '24 hours'));
CREATE TABLE wallets (id INT PRIMARY KEY, balance INT NOT NULL);
INSERT INTO wallets VALUES (1, 0);`)
	if err != nil {
		panic(err)
	}
	exampleCleanups = append(exampleCleanups, cleanup)
	return dsn
}

var exampleCleanups []func()
