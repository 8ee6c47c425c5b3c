package postgres_test

import (
	"context"
	"testing"
	"time"

	"github.com/outbox-relay/outbox-relay/internal/fixtures"
	"github.com/outbox-relay/outbox-relay/internal/layout"
	"github.com/outbox-relay/outbox-relay/internal/pgtest"
	"github.com/outbox-relay/outbox-relay/internal/source"
	"github.com/outbox-relay/outbox-relay/internal/source/postgres"
)

// TestCompleteIsOneTransaction guards the completion's atomicity: the
// acknowledgement, the retry state and the dead letter of one batch commit
// together or not at all. A trigger refuses one of the row updates; nothing
// else of the batch may then remain (a dead letter recorded in a transaction
// of its own would stay in failed_events while its row is still pending,
// and be published later all the same).
func TestCompleteIsOneTransaction(t *testing.T) {
	t.Parallel()
	for _, refuse := range []string{"published", "failed"} {
		t.Run("refused "+refuse, func(t *testing.T) {
			t.Parallel()
			ctx := context.Background()
			_, pool := migrated(t)
			pgtest.Exec(t, pool, fixtures.Seed001)
			pgtest.Exec(t, pool, `INSERT INTO outbox (aggregate_type, aggregate_id, event_type, topic, payload, created_at)
SELECT 'Order', gen_random_uuid(), 'order.placed', 'orders', jsonb_build_object('n', n), '2026-01-01'::timestamptz + n * interval '1 second'
FROM generate_series(1, 3) n`)
			pgtest.Exec(t, pool, `CREATE FUNCTION refuse() RETURNS trigger LANGUAGE plpgsql AS $$
BEGIN IF NEW.status = '`+refuse+`' THEN RAISE EXCEPTION 'refused by the test'; END IF; RETURN NEW; END $$;
CREATE TRIGGER refuse BEFORE UPDATE ON outbox FOR EACH ROW EXECUTE FUNCTION refuse()`)
			st, _ := newStore(t, pool, "s", postgres.Table{Schema: "public", Name: "outbox"}, "status", layout.Spec{}, true)
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
			var pending, dead, retries int
			_ = pool.QueryRow(ctx, "SELECT count(*) FROM outbox WHERE status = 'pending' AND retry_count = 0").Scan(&pending)
			_ = pool.QueryRow(ctx, "SELECT count(*) FROM outbox_relay.failed_events").Scan(&dead)
			_ = pool.QueryRow(ctx, "SELECT count(*) FROM outbox_relay.retry_state").Scan(&retries)
			if pending != 3 || dead != 0 || retries != 0 {
				t.Fatalf("after a failed completion: %d rows untouched (want 3), %d dead letters, %d retry states (want 0)", pending, dead, retries)
			}
		})
	}
}
