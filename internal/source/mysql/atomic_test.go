package mysql_test

import (
	"context"
	"testing"
	"time"

	"github.com/outbox-relay/outbox-relay/internal/layout"
	"github.com/outbox-relay/outbox-relay/internal/source"
)

// TestCompleteIsOneTransaction guards the completion's atomicity: the
// acknowledgement, the retry state and the dead letter of one batch commit
// together or not at all. A trigger refuses one of the row updates; nothing
// else of the batch may then remain (a dead letter recorded in a transaction
// of its own would stay in failed_events while its row is still pending,
// and be published later all the same).
func TestCompleteIsOneTransaction(t *testing.T) {
	t.Parallel()
	for name, refused := range map[string]string{
		"published": "NEW.published AND NEW.published_at IS NOT NULL",
		"dead":      "NEW.published AND NEW.published_at IS NULL",
	} {
		t.Run("refused "+name, func(t *testing.T) {
			t.Parallel()
			ctx := context.Background()
			e := newEnv(t)
			e.exec(t, journeys)
			insertJourneys(t, e, 0, []string{"a1", "a2", "a3"})
			e.exec(t, `CREATE TRIGGER refuse BEFORE UPDATE ON outbox FOR EACH ROW
BEGIN IF `+refused+` THEN SIGNAL SQLSTATE '45000' SET MESSAGE_TEXT = 'refused by the test'; END IF; END`)
			st, _ := e.store(t, e.db, "jm", "outbox", "published-flag", layout.Spec{}, true)
			b, err := st.Claim(ctx, 10)
			if err != nil || b == nil || len(b.Rows()) != 3 {
				t.Fatalf("claim: %v, %v", b, err)
			}
			err = b.Complete(ctx, source.Outcome{
				Published: []int{0},
				Retry:     []source.Retry{{Index: 1, Attempts: 1, At: time.Now().Add(time.Minute), Err: "broker down"}},
				Dead:      []source.Dead{{Index: 2, Attempts: 1, Reason: "unknown topic", PayloadIsJSON: true}},
			})
			if err == nil {
				t.Fatal("Complete succeeded although the trigger refused an update")
			}
			pending := queryInt(t, e.db, "SELECT COUNT(*) FROM outbox WHERE NOT published")
			dead := queryInt(t, e.db, "SELECT COUNT(*) FROM "+e.relayDB+".failed_events")
			retries := queryInt(t, e.db, "SELECT COUNT(*) FROM "+e.relayDB+".retry_state")
			if pending != 3 || dead != 0 || retries != 0 {
				t.Fatalf("after a failed completion: %d rows untouched (want 3), %d dead letters, %d retry states (want 0)", pending, dead, retries)
			}
		})
	}
}
