package e2e

import (
	"context"
	"testing"
	"time"

	"github.com/twmb/franz-go/pkg/kfake"

	"github.com/outbox-relay/outbox-relay/internal/config"
	"github.com/outbox-relay/outbox-relay/internal/layout"
	"github.com/outbox-relay/outbox-relay/internal/pgtest"
)

// TestXIDColumnHoldsLateCommits: row A of a key is inserted first but its
// transaction commits late; row B of the same key commits meanwhile. With
// layout.xid_column the relay holds B back until A's transaction has ended,
// so A is published first although it became visible last.
func TestXIDColumnHoldsLateCommits(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	dsn, pool := pgtest.NewDB(t)
	pgtest.Exec(t, pool, `CREATE TABLE events (
  id BIGSERIAL PRIMARY KEY,
  tx XID8 NOT NULL DEFAULT pg_current_xact_id(),
  k TEXT NOT NULL,
  payload JSONB NOT NULL)`)
	c := kafkaCluster(t, kfake.SeedTopics(1, "ev"))
	col := collect(t, c.ListenAddrs(), "ev")
	runRelay(t, baseConfig(dsn, c.ListenAddrs(), config.Source{
		Name: "ev", Table: "public.events", Topic: "ev",
		Layout: layout.Spec{ID: "id", Payload: "payload", Key: "{k}", XIDColumn: "tx", State: layout.State{Mode: "delete"}},
	}))
	// The wake-up trigger is installed at start; wait for it so that the
	// open transaction below does not hold its creation up.
	waitFor(t, 10*time.Second, "the wake-up trigger", func() (bool, string) {
		var n int
		_ = pool.QueryRow(ctx, "SELECT count(*) FROM pg_trigger WHERE tgname = 'outbox_relay_notify'").Scan(&n)
		return n == 1, "not yet"
	})

	late, err := pool.Begin(ctx)
	if err != nil {
		t.Fatal(err)
	}
	defer func() { _ = late.Rollback(ctx) }()
	if _, err := late.Exec(ctx, `INSERT INTO events (k, payload) VALUES ('K', '{"row": "A"}')`); err != nil {
		t.Fatal(err)
	}
	pgtest.Exec(t, pool, `INSERT INTO events (k, payload) VALUES ('K', '{"row": "B"}')`)
	time.Sleep(500 * time.Millisecond)
	if n := len(col.records()); n != 0 {
		t.Fatalf("%d records published while an older transaction was still open", n)
	}
	if err := late.Commit(ctx); err != nil {
		t.Fatal(err)
	}
	recs := col.waitDistinct(t, 2, 30*time.Second)
	if string(recs[0].Value) != `{"row": "A"}` || string(recs[1].Value) != `{"row": "B"}` {
		t.Fatalf("published %s then %s; want A then B", recs[0].Value, recs[1].Value)
	}
}
