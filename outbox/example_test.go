package outbox_test

import (
	"context"
	"database/sql"
	"fmt"
	"os"
	"testing"

	_ "github.com/jackc/pgx/v5/stdlib"

	"github.com/outbox-relay/outbox-relay/internal/fixtures"
	"github.com/outbox-relay/outbox-relay/internal/pgtest"
	"github.com/outbox-relay/outbox-relay/outbox"
)

var cleanups []func()

func TestMain(m *testing.M) {
	code := m.Run()
	for _, c := range cleanups {
		c()
	}
	os.Exit(code)
}

// A service writes its order and the order's event in one transaction,
// into an outbox with a status column; the relay (preset status)
// publishes the event.
func ExampleWriter_Write() {
	dsn, drop, err := pgtest.TempDatabase(fixtures.Seed001 + `; CREATE TABLE orders (id INT PRIMARY KEY, total INT NOT NULL)`)
	if err != nil {
		panic(err)
	}
	cleanups = append(cleanups, drop)
	db, err := sql.Open("pgx", dsn)
	if err != nil {
		panic(err)
	}
	defer db.Close()
	ctx := context.Background()
	w := outbox.New(outbox.Postgres, outbox.Presets["status"])

	tx, err := db.BeginTx(ctx, nil)
	if err != nil {
		panic(err)
	}
	if _, err := tx.ExecContext(ctx, "INSERT INTO orders VALUES (42, 1999)"); err != nil {
		panic(err)
	}
	_, err = w.Write(ctx, tx, outbox.Event{
		Type: "order.placed", AggregateType: "Order", AggregateID: "9b2e3c1a-5f4d-4c2b-8a7e-1d2c3b4a5f60",
		Topic: "orders", PartitionKey: "42",
		Payload: map[string]any{"order_id": 42, "total": 1999},
	})
	if err != nil {
		panic(err)
	}
	if err := tx.Commit(); err != nil {
		panic(err)
	}
	var topic, status string
	_ = db.QueryRowContext(ctx, "SELECT topic, status FROM outbox").Scan(&topic, &status)
	fmt.Println(topic, status)
	// Output: orders pending
}
