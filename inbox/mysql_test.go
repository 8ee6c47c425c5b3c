package inbox_test

import (
	"context"
	"database/sql"
	"testing"

	_ "github.com/go-sql-driver/mysql"

	"github.com/outbox-relay/outbox-relay/inbox"
	"github.com/outbox-relay/outbox-relay/internal/mytest"
)

// TestInboxMariaDB: the package's own table on MariaDB through
// database/sql: a duplicate is skipped, and expired ids are purged in
// batches while live ones stay.
func TestInboxMariaDB(t *testing.T) {
	ctx := context.Background()
	_, dsn := mytest.NewDatabase(t, "inbox")
	db, err := sql.Open("mysql", dsn)
	if err != nil {
		t.Fatal(err)
	}
	defer db.Close()
	if err := inbox.Migrate(ctx, db, inbox.MySQL); err != nil {
		t.Fatal(err)
	}
	mytest.Exec(t, db, "CREATE TABLE effects (event_id VARCHAR(100) NOT NULL)")
	in := inbox.New(inbox.MySQL, inbox.Own, "billing", 0)
	work := func(ctx context.Context, tx *sql.Tx) error {
		_, err := tx.ExecContext(ctx, "INSERT INTO effects VALUES ('e1')")
		return err
	}
	for i, want := range []bool{true, false} {
		ran, err := in.Process(ctx, db, "e1", work)
		if err != nil || ran != want {
			t.Fatalf("delivery %d: ran %v (%v), want %v", i+1, ran, err, want)
		}
	}
	// Another group processes the same event once too.
	if ran, err := inbox.New(inbox.MySQL, inbox.Own, "audit", 0).Process(ctx, db, "e1", work); err != nil || !ran {
		t.Fatalf("another group: ran %v (%v)", ran, err)
	}
	mytest.Exec(t, db, `INSERT INTO outbox_inbox (consumer_group, event_id, expires_at) VALUES
  ('billing', 'x1', UTC_TIMESTAMP() - INTERVAL 1 HOUR), ('billing', 'x2', UTC_TIMESTAMP() - INTERVAL 1 HOUR),
  ('audit', 'x3', UTC_TIMESTAMP() - INTERVAL 1 SECOND)`)
	n, err := inbox.Purge(ctx, db, inbox.MySQL, inbox.Own, 2)
	if err != nil || n != 3 {
		t.Fatalf("purge: %d %v, want the 3 expired ids", n, err)
	}
	var left int
	_ = db.QueryRowContext(ctx, "SELECT COUNT(*) FROM outbox_inbox").Scan(&left)
	if left != 2 {
		t.Errorf("%d ids left, want e1 of both groups", left)
	}
}
