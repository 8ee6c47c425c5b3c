package mysql_test

import (
	"context"
	"testing"

	"github.com/outbox-relay/outbox-relay/internal/layout"
	"github.com/outbox-relay/outbox-relay/internal/source"
	"github.com/outbox-relay/outbox-relay/internal/source/mysql"
)

// TestTimestampTableTellsDeadFromDelivered: in a table whose only state is
// a published timestamp, a dead letter leaves the pending set with the
// dead-letter mark, never a delivery time, for both timestamp types; a
// replay makes it pending again.
func TestTimestampTableTellsDeadFromDelivered(t *testing.T) {
	t.Parallel()
	for _, typ := range []string{"DATETIME(6)", "TIMESTAMP(6) NULL"} {
		t.Run(typ, func(t *testing.T) {
			t.Parallel()
			ctx := context.Background()
			e := newEnv(t)
			e.exec(t, "CREATE TABLE events (id BIGINT AUTO_INCREMENT PRIMARY KEY, k VARCHAR(20) NOT NULL, payload JSON NOT NULL, published_at "+typ+")",
				`INSERT INTO events (k, payload) VALUES ('a', '{}'), ('b', '{}')`)
			st, _ := e.store(t, e.db, "ev", "events", "", layout.Spec{
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
			var dead string
			if err := e.db.QueryRowContext(ctx, "SELECT DATE_FORMAT(published_at, '%Y-%m-%d %H:%i:%s') FROM events WHERE k = 'b'").Scan(&dead); err != nil {
				t.Fatal(err)
			}
			if dead != layout.DeadLetterMark {
				t.Errorf("dead letter's published_at = %s, want the mark %s", dead, layout.DeadLetterMark)
			}
			if n := queryInt(t, e.db, "SELECT COUNT(*) FROM events WHERE k = 'a' AND published_at > NOW() - INTERVAL 1 DAY"); n != 1 {
				t.Error("the delivered row has no recent published_at")
			}
			evs, err := mysql.ListFailed(ctx, e.db, e.relayDB, source.DLQFilter{})
			if err != nil || len(evs) != 1 {
				t.Fatalf("dead letters: %v %v", evs, err)
			}
			if n, err := st.Replay(ctx, evs, "test"); err != nil || n != 1 {
				t.Fatalf("replay: %d %v", n, err)
			}
			if n := queryInt(t, e.db, "SELECT COUNT(*) FROM events WHERE published_at IS NULL"); n != 1 {
				t.Fatalf("after the replay %d rows pending, want 1", n)
			}
		})
	}
}
