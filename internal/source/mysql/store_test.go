package mysql_test

import (
	"context"
	"fmt"
	"slices"
	"strings"
	"testing"
	"time"
	"unicode/utf8"

	"github.com/outbox-relay/outbox-relay/internal/layout"
	"github.com/outbox-relay/outbox-relay/internal/mytest"
	"github.com/outbox-relay/outbox-relay/internal/source"
	"github.com/outbox-relay/outbox-relay/internal/source/mysql"
)

// journeys is seed 000's service outbox in MySQL's spelling.
const journeys = `CREATE TABLE outbox (
  id CHAR(36) NOT NULL PRIMARY KEY,
  aggregate_id CHAR(36) NOT NULL,
  aggregate_type VARCHAR(100) NOT NULL,
  event_type VARCHAR(100) NOT NULL,
  payload JSON NOT NULL,
  published BOOLEAN NOT NULL DEFAULT FALSE,
  published_at DATETIME(6) NULL,
  created_at DATETIME(6) NOT NULL,
  KEY idx_outbox_pending (published, created_at)
)`

func insertJourneys(t *testing.T, e *env, offset int, agg []string) []string {
	t.Helper()
	var out []string
	for i, a := range agg {
		id := fmt.Sprintf("00000000-0000-0000-0001-%012d", offset+i)
		e.exec(t, fmt.Sprintf(`INSERT INTO outbox (id, aggregate_id, aggregate_type, event_type, payload, created_at)
VALUES ('%s', '%s', 'journey', 'journey.created', JSON_OBJECT('n', %d), UTC_TIMESTAMP(6) + INTERVAL %d SECOND)`, id, a, offset+i, offset+i))
		out = append(out, id)
	}
	return out
}

func TestClaimSkipLockedAndComplete(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	e := newEnv(t)
	e.exec(t, journeys)
	st, l := e.store(t, e.db, "jm", "outbox", "published-flag", layout.Spec{}, true)
	if l.PublishedAt != "published_at" || l.Flag != "published" || l.PayloadJSON {
		t.Fatalf("layout resolved to %+v", l)
	}
	a1, a2, a3 := "a1", "a2", "a3"
	id := insertJourneys(t, e, 0, []string{a1, a2, a3, a1, a3})

	b1, err := st.Claim(ctx, 3)
	if err != nil || b1 == nil {
		t.Fatalf("claim: %v %v", b1, err)
	}
	if got := ids(b1.Rows()); !slices.Equal(got, id[:3]) {
		t.Fatalf("first claim got %v, want %v", got, id[:3])
	}
	r := b1.Rows()[0]
	if r.Topic != "journey.created" || string(r.Key) != a1 || r.OrderKey != a1 || r.EventType != "journey.created" ||
		r.AggregateType != "journey" || r.AggregateID != a1 || string(r.Payload) != `{"n": 0}` || r.CreatedAt.IsZero() {
		t.Fatalf("row rendered as %+v (payload %s)", r, r.Payload)
	}
	// A second claimer skips the locked rows.
	b2, err := st.Claim(ctx, 10)
	if err != nil || b2 == nil {
		t.Fatalf("second claim: %v %v", b2, err)
	}
	if got := ids(b2.Rows()); !slices.Equal(got, id[3:]) {
		t.Fatalf("second claim got %v, want %v", got, id[3:])
	}
	// Everything is held: a third claimer finds nothing.
	if b3, err := st.Claim(ctx, 10); err != nil || b3 != nil {
		t.Fatalf("third claim while all rows are held: %v %v", b3, err)
	}
	if err := b2.Release(ctx); err != nil {
		t.Fatal(err)
	}
	// Row 0 published, row 1 retried (key a2 backs off), row 2 dead.
	err = b1.Complete(ctx, source.Outcome{
		Published: []int{0},
		Retry:     []source.Retry{{Index: 1, Attempts: 1, At: time.Now().Add(time.Hour), Err: "broker down"}},
		Dead:      []source.Dead{{Index: 2, Attempts: 1, Reason: "message too large", PayloadIsJSON: true}},
	})
	if err != nil {
		t.Fatal(err)
	}
	if n := queryInt(t, e.db, "SELECT COUNT(*) FROM outbox WHERE id = ? AND published AND published_at IS NOT NULL", id[0]); n != 1 {
		t.Fatal("row 0 not marked published")
	}
	if n := queryInt(t, e.db, "SELECT COUNT(*) FROM outbox WHERE id = ? AND published AND published_at IS NULL", id[2]); n != 1 {
		t.Fatal("dead row 2 not out of the pending set with no publish time")
	}
	var reason, evType, payload, rowData string
	if err := e.db.QueryRowContext(ctx, "SELECT failure_reason, event_type, payload, row_data FROM "+e.relayDB+
		".failed_events WHERE original_event_id = ?", id[2]).Scan(&reason, &evType, &payload, &rowData); err != nil {
		t.Fatal(err)
	}
	if reason != "message too large" || evType != "journey.created" || payload != `{"n": 2}` {
		t.Fatalf("failed_events row: %q %q %s", reason, evType, payload)
	}
	if n := queryInt(t, e.db, "SELECT COUNT(*) FROM "+e.relayDB+".failed_events WHERE original_event_id = ? AND JSON_UNQUOTE(JSON_EXTRACT(row_data, '$.aggregate_id')) = 'a3'", id[2]); n != 1 {
		t.Fatalf("row_data does not copy the row: %s", rowData)
	}
	// Now due: rows 3 (key a1) and 4 (key a3); row 1 backs off.
	b3, err := st.Claim(ctx, 10)
	if err != nil || b3 == nil {
		t.Fatalf("third claim: %v %v", b3, err)
	}
	if got := ids(b3.Rows()); !slices.Equal(got, []string{id[3], id[4]}) {
		t.Fatalf("third claim got %v, want rows 3 and 4", got)
	}
	_ = b3.Release(ctx)
	// Another row of key a2 waits behind the backing-off one.
	more := insertJourneys(t, e, 10, []string{a2})
	if b4, _ := st.Claim(ctx, 10); b4 != nil {
		for _, r := range b4.Rows() {
			if r.ID == more[0] || r.ID == id[1] {
				t.Fatalf("claimed %s while its key backs off", r.ID)
			}
		}
		_ = b4.Release(ctx)
	}
	// Without ordering, only the backing-off row itself waits.
	unordered, _ := e.store(t, e.db, "jm", "outbox", "published-flag", layout.Spec{}, false)
	b5, err := unordered.Claim(ctx, 10)
	if err != nil || b5 == nil || !slices.Contains(ids(b5.Rows()), more[0]) || slices.Contains(ids(b5.Rows()), id[1]) {
		t.Fatalf("unordered claim: %v %v", b5, err)
	}
	_ = b5.Release(ctx)
	// When the retry is due, the head comes first with its attempt count.
	e.exec(t, "UPDATE "+e.relayDB+".retry_state SET next_attempt_at = UTC_TIMESTAMP(6) - INTERVAL 1 SECOND")
	b6, err := st.Claim(ctx, 10)
	if err != nil || b6 == nil {
		t.Fatalf("claim after backoff: %v %v", b6, err)
	}
	rows := b6.Rows()
	pos := func(id string) int { return slices.IndexFunc(rows, func(r source.Row) bool { return r.ID == id }) }
	if pos(id[1]) < 0 || pos(more[0]) < 0 || pos(id[1]) > pos(more[0]) {
		t.Fatalf("after backoff got %v; want %s before %s", ids(rows), id[1], more[0])
	}
	if rows[pos(id[1])].Attempts != 1 {
		t.Fatalf("attempts = %d, want 1", rows[pos(id[1])].Attempts)
	}
	if err := b6.Complete(ctx, source.Outcome{Published: all(b6)}); err != nil {
		t.Fatal(err)
	}
	if n := queryInt(t, e.db, "SELECT COUNT(*) FROM "+e.relayDB+".retry_state"); n != 0 {
		t.Fatalf("retry_state keeps %d rows after the retried row was published", n)
	}
	// The dead letter counts; nothing is pending any more.
	g, err := st.RecordStats(ctx, source.Stats{Published: 5, DeadLettered: 1, LastPublishedID: more[0]})
	if err != nil || g.Backlog.Pending != 0 || g.DeadLetters != 1 {
		t.Fatalf("gauges %+v %v", g, err)
	}
	if _, err := st.RecordStats(ctx, source.Stats{Published: 2}); err != nil {
		t.Fatal(err)
	}
	var pub, dead int
	var last, schema string
	if err := e.db.QueryRowContext(ctx, "SELECT total_events_published, total_events_dead_lettered, last_published_event_id, schema_name FROM "+
		e.relayDB+".relay_state WHERE source = 'jm'").Scan(&pub, &dead, &last, &schema); err != nil {
		t.Fatal(err)
	}
	if pub != 7 || dead != 1 || last != more[0] || schema != e.appDB {
		t.Fatalf("relay_state: %d published, %d dead, last %q, schema %q", pub, dead, last, schema)
	}
}

// A held batch hides its rows from other claimers, and the application
// keeps inserting meanwhile: the claim takes no gap locks.
func TestHeldBatchInvisibleInsertsGoOn(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	e := newEnv(t)
	e.exec(t, kafkaOutbox)
	for i := range 5 {
		e.exec(t, fmt.Sprintf(`INSERT INTO kafka_outbox (topic, payload_json, `+"`key`"+`) VALUES ('t', '{"i": %d}', 'k%d')`, i, i%2))
	}
	st, _ := e.store(t, e.db, "k", "kafka_outbox", "", kafkaLayout, true)
	held, err := st.Claim(ctx, 3)
	if err != nil || held == nil || !slices.Equal(ids(held.Rows()), []string{"1", "2", "3"}) {
		t.Fatalf("claim: %v %v", held, err)
	}
	t.Cleanup(func() { _ = held.Release(ctx) })
	other, err := st.Claim(ctx, 10)
	if err != nil || other == nil || !slices.Equal(ids(other.Rows()), []string{"4", "5"}) {
		t.Fatalf("second claimer: %v %v", other, err)
	}
	_ = other.Release(ctx)

	app, err := e.db.Conn(ctx)
	if err != nil {
		t.Fatal(err)
	}
	defer app.Close()
	if _, err := app.ExecContext(ctx, "SET SESSION innodb_lock_wait_timeout = 2"); err != nil {
		t.Fatal(err)
	}
	if _, err := app.ExecContext(ctx, "SET SESSION TRANSACTION ISOLATION LEVEL REPEATABLE READ"); err != nil {
		t.Fatal(err)
	}
	start := time.Now()
	if _, err := app.ExecContext(ctx, `INSERT INTO kafka_outbox (topic, payload_json) VALUES ('t', '{"late": true}')`); err != nil {
		t.Fatalf("insert while a batch is held: %v", err)
	}
	if d := time.Since(start); d > time.Second {
		t.Fatalf("insert waited %v behind the claim", d)
	}
	// Released, the rows come back in order with the new one last.
	if err := held.Release(ctx); err != nil {
		t.Fatal(err)
	}
	again, err := st.Claim(ctx, 10)
	if err != nil || again == nil || !slices.Equal(ids(again.Rows()), []string{"1", "2", "3", "4", "5", "6"}) {
		t.Fatalf("claim after release: %v %v", again, err)
	}
	_ = again.Release(ctx)
}

// A claim's connection killed (a relay that died) gives its rows back;
// so does a claim left silent past the claim timeout.
func TestDeadClaimsComeBack(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	e := newEnv(t)
	e.exec(t, kafkaOutbox, `INSERT INTO kafka_outbox (topic, payload_json) VALUES ('t', '{}'), ('t', '{}')`)
	// The store gets a pool of its own user that keeps one idle connection,
	// so that while the claim holds it, it is the only connection of that
	// user in PROCESSLIST, a live view (INNODB_TRX is a cache).
	admin := mytest.Admin(t)
	user := "claim_" + mytest.Suffix()
	mytest.Exec(t, admin, "CREATE USER '"+user+"'@'%' IDENTIFIED BY 'pw'",
		"GRANT ALL ON `"+e.appDB+"`.* TO '"+user+"'@'%'", "GRANT ALL ON `"+e.relayDB+"`.* TO '"+user+"'@'%'")
	t.Cleanup(func() { _, _ = admin.Exec("DROP USER IF EXISTS '" + user + "'@'%'") })
	udb, err := mysql.Open(mytest.WithUser(t, e.dsn, user, "pw"))
	if err != nil {
		t.Fatal(err)
	}
	udb.SetMaxIdleConns(1)
	t.Cleanup(func() { _ = udb.Close() })
	st, _ := e.store(t, udb, "k", "kafka_outbox", "", kafkaLayout, true)

	held, err := st.Claim(ctx, 1)
	if err != nil || held == nil {
		t.Fatalf("claim: %v %v", held, err)
	}
	t.Cleanup(func() { _ = held.Release(ctx) })
	var conn int64
	var n int
	if err := admin.QueryRowContext(ctx, "SELECT MIN(ID), COUNT(*) FROM information_schema.PROCESSLIST WHERE USER = ?", user).Scan(&conn, &n); err != nil || n != 1 {
		t.Fatalf("find the claim's connection: %d connections of %s, %v", n, user, err)
	}
	e.exec(t, fmt.Sprintf("KILL CONNECTION %d", conn))
	deadline := time.Now().Add(10 * time.Second)
	for {
		b, err := st.Claim(ctx, 10)
		if err == nil && b != nil && len(b.Rows()) == 2 {
			_ = b.Release(ctx)
			break
		}
		if b != nil {
			_ = b.Release(ctx)
		}
		if time.Now().After(deadline) {
			t.Fatalf("rows of a killed claim did not come back: %v", err)
		}
		time.Sleep(50 * time.Millisecond)
	}
	if err := held.Complete(ctx, source.Outcome{Published: []int{0}}); err == nil {
		t.Fatal("completing a killed claim succeeded")
	}
	if n := queryInt(t, e.db, "SELECT COUNT(*) FROM kafka_outbox WHERE push_completed_at IS NULL"); n != 2 {
		t.Fatalf("%d rows pending after a killed claim, want 2", n)
	}

	// A relay that hangs: its claim ends with the claim timeout.
	short := e.open(t, e.dsnOpts())
	hung, _ := e.store(t, short, "k", "kafka_outbox", "", kafkaLayout, true)
	hb, err := hung.Claim(ctx, 10)
	if err != nil || hb == nil {
		t.Fatalf("hung claim: %v %v", hb, err)
	}
	t.Cleanup(func() { _ = hb.Release(ctx) })
	if b, _ := st.Claim(ctx, 10); b != nil {
		t.Fatalf("rows visible while the claim is held: %v", ids(b.Rows()))
	}
	time.Sleep(2500 * time.Millisecond)
	b, err := st.Claim(ctx, 10)
	if err != nil || b == nil || len(b.Rows()) != 2 {
		t.Fatalf("rows of a timed-out claim: %v %v", b, err)
	}
	_ = b.Release(ctx)
	if err := hb.Release(ctx); err == nil {
		t.Log("release after the server ended the claim reported no error")
	}
}

// Retry state survives a restart: a new store (a new relay process) still
// waits out the backoff, and the key behind it too.
func TestBackoffPersists(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	e := newEnv(t)
	e.exec(t, kafkaOutbox, `INSERT INTO kafka_outbox (topic, payload_json, `+"`key`, partition_key"+`) VALUES
  ('t', '{"n": 1}', 'k1', ''), ('t', '{"n": 2}', 'k1', ''), ('t', '{"n": 3}', 'x', 'k2'), ('t', '{"n": 4}', 'k2', '')`)
	st, _ := e.store(t, e.db, "k", "kafka_outbox", "", kafkaLayout, true)
	b, err := st.Claim(ctx, 10)
	if err != nil || b == nil || len(b.Rows()) != 4 {
		t.Fatalf("claim: %v %v", b, err)
	}
	// The partition key wins over the key; an empty one falls back to it.
	if keys := []string{b.Rows()[0].OrderKey, b.Rows()[2].OrderKey, b.Rows()[3].OrderKey}; !slices.Equal(keys, []string{"k1", "k2", "k2"}) {
		t.Fatalf("order keys %v", keys)
	}
	if b.Rows()[2].PartitionKey == nil || string(b.Rows()[2].PartitionKey) != "k2" || b.Rows()[0].PartitionKey != nil {
		t.Fatalf("partition keys %q %q", b.Rows()[2].PartitionKey, b.Rows()[0].PartitionKey)
	}
	err = b.Complete(ctx, source.Outcome{
		Retry: []source.Retry{{Index: 0, Attempts: 3, At: time.Now().Add(time.Hour), Err: "timeout"}},
		// row 1 deferred behind row 0; rows 2 and 3 published.
		Published: []int{2, 3},
	})
	if err != nil {
		t.Fatal(err)
	}
	var attempts int
	var reason string
	if err := e.db.QueryRowContext(ctx, "SELECT push_attempts, error_reason FROM kafka_outbox WHERE id = 1").Scan(&attempts, &reason); err != nil {
		t.Fatal(err)
	}
	if attempts != 3 || reason != "timeout" {
		t.Fatalf("row 1 keeps %d attempts, error %q", attempts, reason)
	}
	restarted, _ := e.store(t, e.open(t, e.dsnOpts()), "k", "kafka_outbox", "", kafkaLayout, true)
	if b, err := restarted.Claim(ctx, 10); err != nil || b != nil {
		t.Fatalf("claimed during a persisted backoff: %v %v", b, err)
	}
	e.exec(t, "UPDATE "+e.relayDB+".retry_state SET next_attempt_at = UTC_TIMESTAMP(6)")
	b, err = restarted.Claim(ctx, 10)
	if err != nil || b == nil || !slices.Equal(ids(b.Rows()), []string{"1", "2"}) || b.Rows()[0].Attempts != 3 {
		t.Fatalf("claim after the backoff: %v %v", b, err)
	}
	_ = b.Release(ctx)
}

func (e *env) dsnOpts() (o mysql.ConnOptions) {
	o.ClaimTimeout = time.Second
	return o
}

// TestLongOrderKeyHeldWhileItBacksOff: retry_state keeps only the first
// 500 characters of an order key; the claim must compare the same prefix,
// so that the later rows of a longer key wait while its head backs off. The
// key ends in two-byte characters across the cut, so a cut by bytes would
// not match a cut by characters.
func TestLongOrderKeyHeldWhileItBacksOff(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	e := newEnv(t)
	long := strings.Repeat("k", 490) + strings.Repeat("é", 110) // 600 characters, 710 bytes
	e.exec(t, strings.Replace(kafkaOutbox, "`key` VARCHAR(255)", "`key` VARCHAR(1000)", 1))
	insert := func(n int, key string) {
		t.Helper()
		if _, err := e.db.ExecContext(ctx, "INSERT INTO kafka_outbox (topic, payload_json, `key`) VALUES ('t', ?, ?)",
			fmt.Sprintf(`{"n": %d}`, n), key); err != nil {
			t.Fatal(err)
		}
	}
	insert(1, long)
	insert(2, long)
	insert(3, "x")
	st, _ := e.store(t, e.db, "k", "kafka_outbox", "", kafkaLayout, true)
	b, err := st.Claim(ctx, 10)
	if err != nil || b == nil || !slices.Equal(ids(b.Rows()), []string{"1", "2", "3"}) {
		if b != nil {
			_ = b.Release(ctx)
		}
		t.Fatalf("claim: %v %v", b, err)
	}
	if b.Rows()[0].OrderKey != long {
		_ = b.Release(ctx)
		t.Fatalf("order key of %d characters, want the whole key of 600", utf8.RuneCountInString(b.Rows()[0].OrderKey))
	}
	// Row 1 backs off for an hour; row 2 is left pending behind it.
	if err := b.Complete(ctx, source.Outcome{
		Retry:     []source.Retry{{Index: 0, Attempts: 1, At: time.Now().Add(time.Hour), Err: "timeout"}},
		Published: []int{2},
	}); err != nil {
		t.Fatal(err)
	}
	var stored string
	if err := e.db.QueryRowContext(ctx, "SELECT order_key FROM "+e.relayDB+".retry_state WHERE event_id = '1'").Scan(&stored); err != nil {
		t.Fatal(err)
	}
	if want := []rune(long)[:500]; stored != string(want) {
		t.Fatalf("retry_state.order_key has %d characters, want the key's first 500", utf8.RuneCountInString(stored))
	}
	// A row of the key written later, with no retry state of its own,
	// waits too; another key's row goes.
	insert(4, long)
	insert(5, "y")
	b, err = st.Claim(ctx, 10)
	if err != nil || b == nil || !slices.Equal(ids(b.Rows()), []string{"5"}) {
		var got []string
		if b != nil {
			got = ids(b.Rows())
			_ = b.Release(ctx)
		}
		t.Fatalf("claim while the long key backs off: rows %v (%v), want only row 5", got, err)
	}
	if err := b.Complete(ctx, source.Outcome{Published: []int{0}}); err != nil {
		t.Fatal(err)
	}
	// Once the backoff is over, the key comes back from its head, in order.
	e.exec(t, "UPDATE "+e.relayDB+".retry_state SET next_attempt_at = UTC_TIMESTAMP(6)")
	b, err = st.Claim(ctx, 10)
	if b != nil {
		defer func() { _ = b.Release(ctx) }()
	}
	if err != nil || b == nil || !slices.Equal(ids(b.Rows()), []string{"1", "2", "4"}) || b.Rows()[0].Attempts != 1 {
		t.Fatalf("claim after the backoff: %v %v", b, err)
	}
}
