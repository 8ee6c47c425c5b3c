package mysql_test

import (
	"bytes"
	"context"
	"database/sql"
	"strings"
	"testing"
	"time"

	"github.com/outbox-relay/outbox-relay/internal/layout"
	"github.com/outbox-relay/outbox-relay/internal/mytest"
	"github.com/outbox-relay/outbox-relay/internal/source"
	"github.com/outbox-relay/outbox-relay/internal/source/mysql"
)

// blobOutbox holds binary payloads and deletes delivered rows.
const blobOutbox = `CREATE TABLE blob_outbox (
  id BIGINT UNSIGNED NOT NULL AUTO_INCREMENT PRIMARY KEY,
  topic VARCHAR(100) NOT NULL,
  payload LONGBLOB NOT NULL,
  created_at DATETIME(6) NOT NULL
)`

var blobLayout = layout.Spec{
	ID: "id", Payload: "payload", PayloadFormat: "raw", Topic: "{topic}", CreatedAt: "created_at", OrderBy: "id",
	State: layout.State{Mode: "delete"},
}

// TestBlobPayloadAndDeletedReplay sends bytes that are not UTF-8 through a
// BLOB column: claimed as they are, kept in the dead letter, and put back
// byte for byte when a deleted row is replayed. CreatedAt keeps the
// column's microseconds.
func TestBlobPayloadAndDeletedReplay(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	e := newEnv(t)
	e.exec(t, blobOutbox)
	payload := []byte{0x00, 0xff, 0xfe, '\'', '\\', 0x80, 'x', 0x00}
	created := time.Date(2024, 2, 29, 23, 59, 58, 123456000, time.UTC)
	if _, err := e.db.ExecContext(ctx, "INSERT INTO blob_outbox (topic, payload, created_at) VALUES ('bin', ?, ?), ('bin', ?, ?)",
		payload, created, []byte("second"), created.Add(time.Microsecond)); err != nil {
		t.Fatal(err)
	}
	st, l := e.store(t, e.db, "blob", "blob_outbox", "", blobLayout, false)
	if l.PayloadJSON {
		t.Fatal("a BLOB payload was taken for JSON")
	}
	b, err := st.Claim(ctx, 10)
	if err != nil || b == nil || len(b.Rows()) != 2 {
		t.Fatalf("claim: %v %v", b, err)
	}
	r := b.Rows()[0]
	if !bytes.Equal(r.Payload, payload) {
		t.Errorf("payload %x, want %x", r.Payload, payload)
	}
	if !r.CreatedAt.Equal(created) || r.CreatedAt.Location() != time.UTC {
		t.Errorf("created_at %s, want %s to the microsecond, in UTC", r.CreatedAt, created)
	}
	if d := b.Rows()[1].CreatedAt.Sub(r.CreatedAt); d != time.Microsecond {
		t.Errorf("rows a microsecond apart read %s apart", d)
	}
	err = b.Complete(ctx, source.Outcome{Published: []int{1}, Dead: []source.Dead{{Index: 0, Attempts: 1, Reason: "refused by the broker"}}})
	if err != nil {
		t.Fatal(err)
	}
	if n := queryInt(t, e.db, "SELECT COUNT(*) FROM blob_outbox"); n != 0 {
		t.Fatalf("%d rows left; the delete layout removes delivered and dead rows", n)
	}
	dl, err := mysql.ListFailed(ctx, e.db, e.relayDB, mysql.DLQFilter{Source: "blob"})
	if err != nil || len(dl) != 1 || !bytes.Equal(dl[0].Payload, payload) || dl[0].OriginalEventID != r.ID {
		t.Fatalf("dead letters %+v, %v", dl, err)
	}
	if n, err := st.Replay(ctx, dl, "test"); err != nil || n != 1 {
		t.Fatalf("replay: %d, %v", n, err)
	}
	var (
		got   []byte
		gotAt time.Time
	)
	if err := e.db.QueryRowContext(ctx, "SELECT payload, created_at FROM blob_outbox WHERE id = ?", r.ID).Scan(&got, &gotAt); err != nil {
		t.Fatalf("replayed row: %v", err)
	}
	if !bytes.Equal(got, payload) || !gotAt.Equal(created) {
		t.Errorf("replayed row %x at %s, want %x at %s", got, gotAt, payload, created)
	}
	b, err = st.Claim(ctx, 10)
	if err != nil || b == nil || b.Rows()[0].ID != r.ID || !bytes.Equal(b.Rows()[0].Payload, payload) {
		t.Fatalf("claim after replay: %v %v", b, err)
	}
	_ = b.Release(ctx)
	if n := queryInt(t, e.db, "SELECT COUNT(*) FROM "+mysql.QuoteIdent(e.relayDB)+".failed_event_audit"); n != 1 {
		t.Errorf("%d audit rows, want 1", n)
	}
}

// TestReplayUpdatedRow replays a dead letter of a status layout: the row is
// updated back to pending rather than inserted again, and a replay of an
// event of another source is refused.
func TestReplayUpdatedRow(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	e := newEnv(t)
	e.exec(t, `CREATE TABLE st_outbox (
  id BIGINT UNSIGNED NOT NULL AUTO_INCREMENT PRIMARY KEY,
  topic VARCHAR(100) NOT NULL,
  payload JSON NOT NULL,
  status ENUM('pending', 'published', 'failed') NOT NULL DEFAULT 'pending',
  retry_count SMALLINT NOT NULL DEFAULT 0,
  last_error VARCHAR(40) NULL
)`, `INSERT INTO st_outbox (topic, payload) VALUES ('t', '{"a": 1}')`)
	st, _ := e.store(t, e.db, "st", "st_outbox", "", layout.Spec{
		ID: "id", Payload: "payload", Topic: "{topic}", OrderBy: "id", RetryCount: "retry_count", Error: "last_error",
		State: layout.State{Mode: "status", Status: "status", Pending: "pending", Published: "published", Failed: "failed"},
	}, false)
	b, err := st.Claim(ctx, 10)
	if err != nil || b == nil {
		t.Fatalf("claim: %v %v", b, err)
	}
	if err := b.Complete(ctx, source.Outcome{Dead: []source.Dead{{Index: 0, Attempts: 3, Reason: strings.Repeat("x", 100)}}}); err != nil {
		t.Fatal(err)
	}
	var (
		status  string
		retries int
		lastErr sql.NullString
	)
	read := func() {
		t.Helper()
		if err := e.db.QueryRowContext(ctx, "SELECT status, retry_count, last_error FROM st_outbox WHERE id = 1").Scan(&status, &retries, &lastErr); err != nil {
			t.Fatal(err)
		}
	}
	read()
	if status != "failed" || retries != 3 || len(lastErr.String) != 40 {
		t.Fatalf("dead row: %s, %d, %q", status, retries, lastErr.String)
	}
	dl, err := mysql.ListFailed(ctx, e.db, e.relayDB, mysql.DLQFilter{Source: "st"})
	if err != nil || len(dl) != 1 {
		t.Fatalf("dead letters %+v, %v", dl, err)
	}
	other := dl[0]
	other.Source = "elsewhere"
	if _, err := st.Replay(ctx, []mysql.FailedEvent{other}, "test"); err == nil {
		t.Error("a dead letter of another source was replayed")
	}
	if n, err := st.Replay(ctx, dl, "test"); err != nil || n != 1 {
		t.Fatalf("replay: %d, %v", n, err)
	}
	read()
	if status != "pending" || retries != 0 || lastErr.Valid {
		t.Fatalf("replayed row: %s, %d, %v; want pending, 0, NULL", status, retries, lastErr)
	}
	if n := queryInt(t, e.db, "SELECT COUNT(*) FROM st_outbox"); n != 1 {
		t.Errorf("%d rows after replay, want the one row updated", n)
	}
	if dl, _ := mysql.ListFailed(ctx, e.db, e.relayDB, mysql.DLQFilter{Source: "st", IncludeReplayed: true}); len(dl) != 1 || dl[0].ReplayCount != 1 || dl[0].ReplayedAt == nil {
		t.Errorf("dead letter after replay %+v", dl)
	}
}

// TestPrivilegeCheck grants a user of its own exactly what a layout needs,
// then less and more, and reads what CheckPrivileges reports.
func TestPrivilegeCheck(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	e := newEnv(t)
	e.exec(t, journeys)
	admin := mytest.Admin(t)
	user := "relay_" + mytest.Suffix()
	mytest.Exec(t, admin, "CREATE USER '"+user+"'@'%' IDENTIFIED BY 'pw'")
	t.Cleanup(func() { _, _ = admin.Exec("DROP USER IF EXISTS '" + user + "'@'%'") })
	_, l := e.store(t, e.db, "priv", "outbox", "published-flag", layout.Spec{}, false)
	need := l.NeededPrivileges()
	if !slicesEqual(need, []string{"SELECT", "UPDATE"}) {
		t.Fatalf("needed %v", need)
	}
	cols := l.UpdatedColumns()
	tbl := mysql.Table{Schema: e.appDB, Name: "outbox"}
	udb, err := mysql.Open(mytest.WithUser(t, e.dsn, user, "pw"))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = udb.Close() })
	check := func(wantMissing, wantExtra []string) {
		t.Helper()
		p, err := mysql.CheckPrivileges(ctx, udb, tbl, need, cols...)
		if err != nil {
			t.Fatal(err)
		}
		if !slicesEqual(p.Missing, wantMissing) || !slicesEqual(p.Extra, wantExtra) {
			t.Errorf("missing %v, extra %v; want %v, %v", p.Missing, p.Extra, wantMissing, wantExtra)
		}
	}
	q := "`" + e.appDB + "`.outbox"
	mytest.Exec(t, admin, "GRANT SELECT ON "+q+" TO '"+user+"'@'%'")
	check([]string{"UPDATE"}, nil)
	// UPDATE on the columns the relay writes is enough.
	mytest.Exec(t, admin, "GRANT UPDATE ("+strings.Join(cols, ", ")+") ON "+q+" TO '"+user+"'@'%'")
	check(nil, nil)
	// Database-wide grants count, and what is not needed is reported.
	mytest.Exec(t, admin, "GRANT DELETE ON `"+e.appDB+"`.* TO '"+user+"'@'%'")
	check(nil, []string{"DELETE"})
	missing, err := mysql.CheckRelayDatabase(ctx, udb, e.relayDB)
	if err != nil || len(missing) == 0 {
		t.Errorf("relay database check for a user without grants on it: %v, %v", missing, err)
	}
	if missing, err := mysql.CheckRelayDatabase(ctx, e.db, e.relayDB); err != nil || len(missing) != 0 {
		t.Errorf("relay database check for root: %v, %v", missing, err)
	}
}

func slicesEqual(a, b []string) bool {
	if len(a) != len(b) {
		return false
	}
	for i := range a {
		if a[i] != b[i] {
			return false
		}
	}
	return true
}

// TestStoreClaimTimeout checks which claim timeout wins: the store's own,
// set on the claim's connection and put back afterwards, else the pool's.
func TestStoreClaimTimeout(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	e := newEnv(t)
	e.exec(t, journeys)
	insertJourneys(t, e, 0, []string{"a", "b"})
	db := e.open(t, mysql.ConnOptions{ClaimTimeout: 90 * time.Second})
	db.SetMaxOpenConns(1)
	_, l := e.store(t, db, "ct", "outbox", "published-flag", layout.Spec{}, false)
	pool := mysql.New(db, mysql.Options{Source: "ct", Table: mysql.Table{Name: "outbox"}, RelayDatabase: e.relayDB, Layout: l})
	if got := pool.ClaimTimeout(); got != 90*time.Second {
		t.Errorf("store without a claim timeout: %s, want the pool's 90s", got)
	}
	own := mysql.New(db, mysql.Options{Source: "ct", Table: mysql.Table{Name: "outbox"}, RelayDatabase: e.relayDB, Layout: l,
		ClaimTimeout: 7 * time.Second})
	session := func(q string) int {
		t.Helper()
		return queryInt(t, db, q)
	}
	b, err := own.Claim(ctx, 1)
	if err != nil || b == nil {
		t.Fatalf("claim: %v %v", b, err)
	}
	if err := b.Release(ctx); err != nil {
		t.Fatal(err)
	}
	if w := session("SELECT @@session.wait_timeout"); w != 90 {
		t.Errorf("wait_timeout after a claim with the store's timeout: %d, want the pool's 90 back", w)
	}
	// That the claim itself is cut after the store's timeout, on a pool
	// whose connections keep 600s, is the conformance suite's
	// IdleClaimEndsAfterTimeout (its stores set Options.ClaimTimeout).
}
