package postgres_test

import (
	"context"
	"testing"
	"time"

	"github.com/outbox-relay/outbox-relay/internal/layout"
	"github.com/outbox-relay/outbox-relay/internal/pgtest"
	"github.com/outbox-relay/outbox-relay/internal/source"
	"github.com/outbox-relay/outbox-relay/internal/source/postgres"
)

// TestTimestampTableTellsDeadFromDelivered: in a table whose only state is
// a published timestamp, a dead letter leaves the pending set with the
// dead-letter mark, never a delivery time, for both timestamp types; a
// replay makes it pending again.
func TestTimestampTableTellsDeadFromDelivered(t *testing.T) {
	t.Parallel()
	for _, typ := range []string{"TIMESTAMPTZ", "TIMESTAMP"} {
		t.Run(typ, func(t *testing.T) {
			t.Parallel()
			ctx := context.Background()
			_, pool := migrated(t)
			pgtest.Exec(t, pool, `CREATE TABLE events (id BIGSERIAL PRIMARY KEY, k TEXT NOT NULL, payload JSONB NOT NULL,
  published_at `+typ+`);
INSERT INTO events (k, payload) VALUES ('a', '{}'), ('b', '{}')`)
			st, _ := newStore(t, pool, "ev", postgres.Table{Schema: "public", Name: "events"}, "", layout.Spec{
				ID: "id", Payload: "payload", Key: "{k}", Topic: "ev", State: layout.State{Mode: "timestamp", PublishedAt: []string{"published_at"}},
			}, true)
			b, err := st.Claim(ctx, 10)
			if err != nil || b == nil || len(b.Rows()) != 2 {
				t.Fatalf("claim: %v %v", b, err)
			}
			if err := b.Complete(ctx, source.Outcome{Published: []int{0},
				Dead: []source.Dead{{Index: 1, Attempts: 1, Reason: "refused", PayloadIsJSON: true}}}); err != nil {
				t.Fatal(err)
			}
			var delivered, dead string
			if err := pool.QueryRow(ctx, `SELECT to_char(published_at, 'YYYY-MM-DD HH24:MI:SS') FROM events WHERE k = 'a'`).Scan(&delivered); err != nil {
				t.Fatal(err)
			}
			if err := pool.QueryRow(ctx, `SELECT to_char(published_at, 'YYYY-MM-DD HH24:MI:SS') FROM events WHERE k = 'b'`).Scan(&dead); err != nil {
				t.Fatal(err)
			}
			if dead != layout.DeadLetterMark {
				t.Errorf("dead letter's published_at = %s, want the mark %s", dead, layout.DeadLetterMark)
			}
			if delivered[:4] != time.Now().UTC().Format("2006") && delivered[:4] != time.Now().Format("2006") {
				t.Errorf("delivered row's published_at = %s", delivered)
			}
			evs, err := postgres.ListFailed(ctx, pool, relaySchema, source.DLQFilter{})
			if err != nil || len(evs) != 1 {
				t.Fatalf("dead letters: %v %v", evs, err)
			}
			if n, err := st.Replay(ctx, evs, "test"); err != nil || n != 1 {
				t.Fatalf("replay: %d %v", n, err)
			}
			var pending int
			_ = pool.QueryRow(ctx, "SELECT count(*) FROM events WHERE published_at IS NULL").Scan(&pending)
			if pending != 1 {
				t.Fatalf("after the replay %d rows pending, want 1", pending)
			}
		})
	}
}
