package inbox_test

import (
	"context"
	"errors"
	"testing"

	"github.com/jackc/pgx/v5"

	"github.com/outbox-relay/outbox-relay/inbox"
	"github.com/outbox-relay/outbox-relay/internal/pgtest"
)

// TestProcessPgx: through pgx, a duplicate is skipped, and work that fails
// leaves no record of the event, which is then processed on its next
// delivery.
func TestProcessPgx(t *testing.T) {
	ctx := context.Background()
	_, pool := pgtest.NewDB(t)
	pgtest.Exec(t, pool, `CREATE TABLE processed_events (event_id UUID PRIMARY KEY, consumer_group VARCHAR(100) NOT NULL,
  processed_at TIMESTAMPTZ NOT NULL DEFAULT NOW(), expires_at TIMESTAMPTZ NOT NULL DEFAULT (NOW() + INTERVAL '24 hours'));
CREATE TABLE effects (event_id UUID NOT NULL)`)
	in := inbox.New(inbox.Postgres, inbox.ProcessedEvents, "wallet", 0)
	const id = "0190f5a2-7c1e-7b3a-9d4e-2f6a8b0c1d2e"
	failing := errors.New("the consumer's work failed")
	work := func(fail bool) func(context.Context, pgx.Tx) error {
		return func(ctx context.Context, tx pgx.Tx) error {
			if _, err := tx.Exec(ctx, "INSERT INTO effects VALUES ($1)", id); err != nil {
				return err
			}
			if fail {
				return failing
			}
			return nil
		}
	}
	if ran, err := in.ProcessPgx(ctx, pool, id, work(true)); !errors.Is(err, failing) || ran {
		t.Fatalf("failing work: ran %v, %v", ran, err)
	}
	for i, want := range []bool{true, false} {
		if ran, err := in.ProcessPgx(ctx, pool, id, work(false)); err != nil || ran != want {
			t.Fatalf("delivery %d: ran %v (%v), want %v", i+2, ran, err, want)
		}
	}
	var n int
	_ = pool.QueryRow(ctx, "SELECT count(*) FROM effects").Scan(&n)
	if n != 1 {
		t.Errorf("%d side effects, want 1", n)
	}
}
