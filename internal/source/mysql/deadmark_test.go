package mysql_test

import (
	"context"
	"slices"
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

// TestPurgeDead: a purge deletes a dead letter's record, audited, and
// leaves the row as it is; an unknown id purges nothing.
func TestPurgeDead(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	e := newEnv(t)
	e.exec(t, journeys)
	insertJourneys(t, e, 0, []string{"a1"})
	st, _ := e.store(t, e.db, "jm", "outbox", "published-flag", layout.Spec{}, true)
	b, err := st.Claim(ctx, 10)
	if err != nil || b == nil {
		t.Fatalf("claim: %v %v", b, err)
	}
	if err := b.Complete(ctx, source.Outcome{Dead: []source.Dead{{Index: 0, Attempts: 1, Reason: "refused", PayloadIsJSON: true}}}); err != nil {
		t.Fatal(err)
	}
	evs, err := mysql.ListFailed(ctx, e.db, e.relayDB, source.DLQFilter{})
	if err != nil || len(evs) != 1 {
		t.Fatalf("dead letters: %v %v", evs, err)
	}
	// Ids compare as text: "<id>x" (or a PostgreSQL dead letter's uuid)
	// is no id here, though a number conversion would read it as one.
	if n, err := mysql.PurgeDead(ctx, e.db, e.relayDB, []string{"999999", evs[0].ID + "x"}, "test"); err != nil || n != 0 {
		t.Fatalf("purge of unknown ids: %d %v", n, err)
	}
	if n, err := mysql.PurgeDead(ctx, e.db, e.relayDB, []string{evs[0].ID}, "test"); err != nil || n != 1 {
		t.Fatalf("purge: %d %v", n, err)
	}
	if n := queryInt(t, e.db, "SELECT COUNT(*) FROM "+e.relayDB+".failed_events"); n != 0 {
		t.Errorf("%d dead letters left after the purge", n)
	}
	if n := queryInt(t, e.db, "SELECT COUNT(*) FROM "+e.relayDB+".failed_event_audit WHERE action = 'purge' AND actor = 'test'"); n != 1 {
		t.Errorf("%d purge audit rows, want 1", n)
	}
	if n := queryInt(t, e.db, "SELECT COUNT(*) FROM outbox WHERE published"); n != 1 {
		t.Error("the purged dead letter's row changed")
	}
}

// TestListFailedByReasonNewestFirst: the console's selection, a substring of
// the reason in any case and the newest failure first up to a limit.
func TestListFailedByReasonNewestFirst(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	e := newEnv(t)
	e.exec(t, journeys)
	insertJourneys(t, e, 0, []string{"a1", "a2", "a3"})
	st, _ := e.store(t, e.db, "jm", "outbox", "published-flag", layout.Spec{}, true)
	b, err := st.Claim(ctx, 10)
	if err != nil || b == nil || len(b.Rows()) != 3 {
		t.Fatalf("claim: %v %v", b, err)
	}
	if err := b.Complete(ctx, source.Outcome{Dead: []source.Dead{
		{Index: 0, Attempts: 1, Reason: "Broker refused: TOPIC_AUTHORIZATION_FAILED", PayloadIsJSON: true},
		{Index: 1, Attempts: 1, Reason: "payload too large", PayloadIsJSON: true},
		{Index: 2, Attempts: 1, Reason: "broker refused: timeout", PayloadIsJSON: true},
	}}); err != nil {
		t.Fatal(err)
	}
	// The first row's failure is the oldest, the third's the newest.
	e.exec(t, "UPDATE "+e.relayDB+".failed_events SET last_failed_at = last_failed_at - INTERVAL 1 HOUR WHERE failure_reason LIKE '%AUTHORIZATION%'",
		"UPDATE "+e.relayDB+".failed_events SET last_failed_at = last_failed_at + INTERVAL 1 HOUR WHERE failure_reason LIKE '%timeout%'")
	reasons := func(f source.DLQFilter) []string {
		t.Helper()
		evs, err := mysql.ListFailed(ctx, e.db, e.relayDB, f)
		if err != nil {
			t.Fatal(err)
		}
		var out []string
		for _, ev := range evs {
			out = append(out, ev.Reason)
		}
		return out
	}
	if got := reasons(source.DLQFilter{Reason: "BROKER REFUSED", Newest: true}); !slices.Equal(got,
		[]string{"broker refused: timeout", "Broker refused: TOPIC_AUTHORIZATION_FAILED"}) {
		t.Errorf("reason BROKER REFUSED, newest first: %q", got)
	}
	if got := reasons(source.DLQFilter{Reason: "%"}); len(got) != 0 {
		t.Errorf("reason %%, a character no reason holds: %q", got)
	}
	if got := reasons(source.DLQFilter{Newest: true, Limit: 2}); !slices.Equal(got, []string{"broker refused: timeout", "payload too large"}) {
		t.Errorf("the two newest: %q", got)
	}
}
