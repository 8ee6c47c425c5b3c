package mysql_test

import (
	"context"
	"errors"
	"fmt"
	"sync"
	"testing"
	"time"

	"github.com/outbox-relay/outbox-relay/internal/layout"
	"github.com/outbox-relay/outbox-relay/internal/mytest"
	"github.com/outbox-relay/outbox-relay/internal/source"
	"github.com/outbox-relay/outbox-relay/internal/source/mysql"
)

// oldPublished makes a journeys outbox with n rows delivered a month ago,
// and returns its layout.
func oldPublished(t *testing.T, e *env, n int) *layout.Layout {
	t.Helper()
	e.exec(t, journeys)
	insertOld(t, e, n, "")
	_, l := e.store(t, e.db, "jm", "outbox", "published-flag", layout.Spec{}, true)
	return l
}

// insertOld inserts n journeys delivered a month ago, with payloads of pad
// as well.
func insertOld(t *testing.T, e *env, n int, pad string) {
	t.Helper()
	for i := 0; i < n; i += 500 {
		_, err := e.db.ExecContext(context.Background(), `INSERT INTO outbox (id, aggregate_id, aggregate_type, event_type, payload, published, published_at, created_at)
SELECT UUID(), UUID(), 'journey', 'journey.created', JSON_OBJECT('n', seq, 'pad', ?), TRUE,
  UTC_TIMESTAMP(6) - INTERVAL 30 DAY, UTC_TIMESTAMP(6) - INTERVAL 31 DAY
FROM seq_1_to_`+fmt.Sprint(min(500, n-i)), pad)
		if err != nil {
			t.Fatal(err)
		}
	}
}

var journeyTable = mysql.Table{Name: "outbox"}

// TestPurgeCommitsEachBatch watches the table from another connection while
// Purge runs: the rows go in steps of the batch size, each committed on its
// own, so that the table is seen part-purged several times. One DELETE of
// every row would take it from all to none at once.
func TestPurgeCommitsEachBatch(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	const rows, batch = 60, 10
	e := newEnv(t)
	l := oldPublished(t, e, rows)

	var (
		mu   sync.Mutex
		seen = map[int]bool{}
	)
	done := make(chan struct{})
	var wg sync.WaitGroup
	wg.Go(func() {
		for {
			var n int
			if err := e.db.QueryRowContext(ctx, "SELECT COUNT(*) FROM outbox").Scan(&n); err == nil {
				mu.Lock()
				seen[n] = true
				mu.Unlock()
			}
			select {
			case <-done:
				return
			case <-time.After(5 * time.Millisecond):
			}
		}
	})
	res, err := mysql.Purge(ctx, e.db, mysql.PurgeParams{Source: "jm", Table: journeyTable, RelayDatabase: e.relayDB, Layout: l, PurgeOptions: source.PurgeOptions{OlderThan: week, BatchSize: batch, Pause: 100 * time.Millisecond}})
	close(done)
	wg.Wait()
	if err != nil {
		t.Fatal(err)
	}
	if res.Published != rows || res.Batches < rows/batch {
		t.Errorf("deleted %d rows in %d batches, want %d in at least %d", res.Published, res.Batches, rows, rows/batch)
	}
	var partial []int
	for n := range seen {
		if n > 0 && n < rows {
			partial = append(partial, n)
			if n%batch != 0 {
				t.Errorf("saw %d rows left: not a whole number of batches of %d", n, batch)
			}
		}
	}
	if len(partial) < 3 {
		t.Errorf("saw the table part-purged %d times (%v), want at least 3: the batches are not committed one by one", len(partial), partial)
	}
}

// TestPurgeGivesUpOnTableLock: after a purge that gave up on a table lock
// (LOCK TABLES ... READ, as a backup or a migration takes), the lock
// timeouts it set on its sessions are put back on the connections it hands
// back to the pool. That it gives up at all is the conformance suite's
// RetentionGivesUpOnTableLock.
func TestPurgeGivesUpOnTableLock(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	e := newEnv(t)
	l := oldPublished(t, e, 5)
	holder, err := e.db.Conn(ctx)
	if err != nil {
		t.Fatal(err)
	}
	defer holder.Close()
	if _, err := holder.ExecContext(ctx, "LOCK TABLES outbox READ"); err != nil {
		t.Fatal(err)
	}
	defer func() { _, _ = holder.ExecContext(ctx, "UNLOCK TABLES") }()
	pctx, cancel := context.WithTimeout(ctx, 30*time.Second)
	defer cancel()
	start := time.Now()
	_, err = mysql.Purge(pctx, e.db, mysql.PurgeParams{Source: "jm", Table: journeyTable, RelayDatabase: e.relayDB, Layout: l, PurgeOptions: source.PurgeOptions{OlderThan: week, LockTimeout: time.Second, Pause: 20 * time.Millisecond}})
	if err == nil {
		t.Fatal("purge succeeded while the table was locked")
	}
	if pctx.Err() != nil {
		t.Fatalf("purge waited for the lock until the test gave up: %v", err)
	}
	if took := time.Since(start); took > 15*time.Second {
		t.Errorf("purge took %s to give up", took)
	}
	t.Logf("gave up after %s: %v", time.Since(start).Round(time.Millisecond), err)
	if _, err := holder.ExecContext(ctx, "UNLOCK TABLES"); err != nil {
		t.Fatal(err)
	}
	var global, session int
	if err := e.db.QueryRowContext(ctx, "SELECT @@GLOBAL.innodb_lock_wait_timeout, @@SESSION.innodb_lock_wait_timeout").Scan(&global, &session); err != nil {
		t.Fatal(err)
	}
	if global != session {
		t.Errorf("a pooled connection kept the purge's lock timeout: %d, global %d", session, global)
	}
}

// TestPurgeRelayTables: dead letters replayed before the cutoff go with
// their audit rows; those replayed since, and open ones, stay. Retry state
// of events no longer in the table goes; that of present events, and of
// other sources, stays.
func TestPurgeRelayTables(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	e := newEnv(t)
	rt := retentionTables[1] // status
	e.exec(t, rt.ddl)
	st, l := e.store(t, e.db, "src", rt.table(), rt.preset, rt.over, false)
	ids := rt.fill(t, e, 3)
	settle(t, st, nil, ids, nil)
	evs, err := mysql.ListFailed(ctx, e.db, e.relayDB, mysql.DLQFilter{EventIDs: ids[:2]})
	if err != nil || len(evs) != 2 {
		t.Fatalf("list dead letters: %v %v", evs, err)
	}
	if n, err := st.Replay(ctx, evs, "test"); err != nil || n != 2 {
		t.Fatalf("replay: %d %v", n, err)
	}
	rs := e.relayDB
	e.exec(t, "UPDATE "+rs+".failed_events SET replayed_at = UTC_TIMESTAMP(6) - INTERVAL 30 DAY WHERE original_event_id = '"+ids[0]+"'",
		"INSERT INTO "+rs+".retry_state (source, event_id, attempts, next_attempt_at, last_error) VALUES ('src', UUID(), 1, UTC_TIMESTAMP(6), '')",
		"INSERT INTO "+rs+".retry_state (source, event_id, attempts, next_attempt_at, last_error) VALUES ('other', UUID(), 1, UTC_TIMESTAMP(6), '')",
		"INSERT INTO "+rs+".retry_state (source, event_id, attempts, next_attempt_at, last_error) VALUES ('src', '"+ids[2]+"', 1, UTC_TIMESTAMP(6), '')")

	p := purgeParams(e, l, rt.table())
	for _, dry := range []bool{true, false} {
		p.DryRun = dry
		res, err := mysql.Purge(ctx, e.db, p)
		if err != nil {
			t.Fatal(err)
		}
		if res.FailedEvents != 1 || res.Audit != 1 || res.RetryState != 1 {
			t.Errorf("dry run %v: %d dead letters, %d audit rows, %d retry states; want 1 of each", dry, res.FailedEvents, res.Audit, res.RetryState)
		}
		wantFailed, wantAudit, wantRetry := 2, 1, 2
		if dry {
			wantFailed, wantAudit, wantRetry = 3, 2, 3
		}
		if n := queryInt(t, e.db, "SELECT COUNT(*) FROM "+rs+".failed_events"); n != wantFailed {
			t.Errorf("dry run %v: %d dead letters left, want %d", dry, n, wantFailed)
		}
		if n := queryInt(t, e.db, "SELECT COUNT(*) FROM "+rs+".failed_event_audit"); n != wantAudit {
			t.Errorf("dry run %v: %d audit rows left, want %d", dry, n, wantAudit)
		}
		if n := queryInt(t, e.db, "SELECT COUNT(*) FROM "+rs+".retry_state"); n != wantRetry {
			t.Errorf("dry run %v: %d retry states left, want %d", dry, n, wantRetry)
		}
	}
	if n := queryInt(t, e.db, "SELECT COUNT(*) FROM "+rs+".failed_events WHERE original_event_id = ?", ids[0]); n != 0 {
		t.Error("the dead letter replayed a month ago is still there")
	}
	if n := queryInt(t, e.db, "SELECT COUNT(*) FROM "+rs+".retry_state WHERE source = 'other'"); n != 1 {
		t.Error("another source's retry state was deleted")
	}
	if n := queryInt(t, e.db, "SELECT COUNT(*) FROM "+rs+".retry_state WHERE event_id = ?", ids[2]); n != 1 {
		t.Error("the retry state of an event still in the table was deleted")
	}
}

// TestPurgeBesideClaims runs Purge while relays claim and deliver new rows
// of the same table, by its primary key as a relay does: every new row is
// claimed exactly once and in order, no claim or acknowledgement waits for
// a lock, and exactly the old rows are deleted.
func TestPurgeBesideClaims(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	e := newEnv(t)
	e.exec(t, kafkaOutbox)
	const old, fresh = 400, 300
	e.exec(t, fmt.Sprintf(`INSERT INTO kafka_outbox (topic, payload_json, `+"`key`"+`, created_at, push_completed_at)
SELECT 'orders', '{}', CONCAT('k', seq %% 7), UTC_TIMESTAMP(6) - INTERVAL 31 DAY, UTC_TIMESTAMP(6) - INTERVAL 30 DAY FROM seq_1_to_%d`, old))
	_, l := e.store(t, e.db, "ko", "kafka_outbox", "", kafkaLayout, true)
	db := e.open(t, mysql.ConnOptions{})
	st := mysql.New(db, mysql.Options{Source: "ko", Table: mysql.Table{Name: "kafka_outbox"}, RelayDatabase: e.relayDB, Layout: l,
		Ordering: true, ClaimIndex: "PRIMARY"})

	var (
		wg       sync.WaitGroup
		mu       sync.Mutex
		claimed  []string
		claimErr error
		inserted = make(chan struct{})
	)
	wg.Go(func() {
		defer close(inserted)
		for range fresh / 10 {
			if _, err := e.db.ExecContext(ctx, "INSERT INTO kafka_outbox (topic, payload_json, `key`) SELECT 'orders', '{}', CONCAT('k', seq % 7) FROM seq_1_to_10"); err != nil {
				claimErr = err
				return
			}
			time.Sleep(5 * time.Millisecond)
		}
	})
	for range 2 {
		wg.Go(func() {
			deadline := time.Now().Add(60 * time.Second)
			for time.Now().Before(deadline) {
				cctx, cancel := context.WithTimeout(ctx, 10*time.Second)
				b, err := st.Claim(cctx, 20)
				cancel()
				if err != nil {
					mu.Lock()
					claimErr = errors.Join(claimErr, err)
					mu.Unlock()
					return
				}
				if b == nil {
					select {
					case <-inserted:
						if queryInt(t, e.db, "SELECT COUNT(*) FROM kafka_outbox WHERE push_completed_at IS NULL") == 0 {
							return
						}
					default:
					}
					time.Sleep(5 * time.Millisecond)
					continue
				}
				mu.Lock()
				claimed = append(claimed, ids(b.Rows())...)
				mu.Unlock()
				time.Sleep(2 * time.Millisecond) // published meanwhile
				if err := b.Complete(ctx, source.Outcome{Published: all(b)}); err != nil {
					mu.Lock()
					claimErr = errors.Join(claimErr, err)
					mu.Unlock()
					return
				}
			}
		})
	}
	res, err := mysql.Purge(ctx, e.db, mysql.PurgeParams{Source: "ko", Table: mysql.Table{Name: "kafka_outbox"}, RelayDatabase: e.relayDB, Layout: l, PurgeOptions: source.PurgeOptions{OlderThan: week, BatchSize: 25, Pause: 5 * time.Millisecond}})
	wg.Wait()
	if err != nil {
		t.Fatalf("purge beside claims: %v", err)
	}
	if claimErr != nil {
		t.Fatalf("claims beside the purge: %v", claimErr)
	}
	// Claims read by the primary key and so lock, for an instant, the
	// delivered rows they pass over; a purge skips a row locked at that
	// instant and the next run takes it. Nothing else may be left.
	deleted := res.Published
	if skipped := old - deleted; skipped < 0 || skipped > old/10 {
		t.Errorf("deleted %d rows beside the claims, want the %d old ones (a few skipped at most)", deleted, old)
	}
	res, err = mysql.Purge(ctx, e.db, mysql.PurgeParams{Source: "ko", Table: mysql.Table{Name: "kafka_outbox"}, RelayDatabase: e.relayDB, Layout: l, PurgeOptions: source.PurgeOptions{OlderThan: week, BatchSize: 25}})
	if err != nil {
		t.Fatalf("second purge: %v", err)
	}
	if deleted += res.Published; deleted != old {
		t.Errorf("deleted %d rows in two runs, want the %d old ones", deleted, old)
	}
	seen := map[string]int{}
	for _, id := range claimed {
		seen[id]++
	}
	if len(seen) != fresh || len(claimed) != fresh {
		t.Errorf("%d claims of %d distinct rows, want each of the %d new rows once", len(claimed), len(seen), fresh)
	}
	if n := queryInt(t, e.db, "SELECT COUNT(*) FROM kafka_outbox"); n != fresh {
		t.Errorf("%d rows left, want the %d new ones", n, fresh)
	}
	if n := queryInt(t, e.db, "SELECT COUNT(*) FROM kafka_outbox WHERE push_completed_at IS NULL"); n != 0 {
		t.Errorf("%d new rows never delivered", n)
	}
}

// TestOptimize rebuilds a table whose rows were all purged: the space they
// held is given back.
func TestOptimize(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	e := newEnv(t)
	l := oldPublished(t, e, 0)
	pad := fmt.Sprintf("%0500d", 0)
	insertOld(t, e, 5000, pad)
	// The size before is the size of the full table.
	mytest.Exec(t, e.db, "ANALYZE TABLE outbox")
	if _, err := mysql.Purge(ctx, e.db, mysql.PurgeParams{Source: "jm", Table: journeyTable, RelayDatabase: e.relayDB, Layout: l, PurgeOptions: source.PurgeOptions{OlderThan: week, BatchSize: 2000}}); err != nil {
		t.Fatal(err)
	}
	res, err := mysql.Optimize(ctx, e.db, mysql.Table{Schema: e.appDB, Name: "outbox"})
	if err != nil {
		t.Fatal(err)
	}
	t.Logf("%+v", res)
	if res.Before.DataBytes < 1<<20 || res.After.Total() >= res.Before.Total()/4 {
		t.Errorf("size before %d (data %d), after %d (data %d): the space of the deleted rows was not given back",
			res.Before.Total(), res.Before.DataBytes, res.After.Total(), res.After.DataBytes)
	}
	if res.After.Rows != 0 {
		t.Errorf("after optimize: %d rows estimated, want 0", res.After.Rows)
	}
	if _, err := mysql.Optimize(ctx, e.db, mysql.Table{Name: "no_such_table"}); err == nil {
		t.Error("optimize of a missing table succeeded")
	}
}

// TestRetentionNeedsPrivileges: a user that may only read and update the
// table (the relay's least privilege) cannot purge it, nor optimize it.
func TestRetentionNeedsPrivileges(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	e := newEnv(t)
	l := oldPublished(t, e, 3)
	user := "ret_" + mytest.Suffix()
	admin := mytest.Admin(t)
	mytest.Exec(t, admin, "CREATE USER '"+user+"'@'%' IDENTIFIED BY 'pw'")
	t.Cleanup(func() { _, _ = admin.ExecContext(context.Background(), "DROP USER IF EXISTS '"+user+"'@'%'") })
	mytest.Exec(t, admin,
		"GRANT SELECT, UPDATE ON `"+e.appDB+"`.outbox TO '"+user+"'@'%'",
		"GRANT SELECT, INSERT, UPDATE, DELETE ON `"+e.relayDB+"`.* TO '"+user+"'@'%'")
	db, err := mysql.Open(mytest.WithUser(t, e.dsn, user, "pw"))
	if err != nil {
		t.Fatal(err)
	}
	defer db.Close()
	_, err = mysql.Purge(ctx, db, mysql.PurgeParams{Source: "jm", Table: journeyTable, RelayDatabase: e.relayDB, Layout: l, PurgeOptions: source.PurgeOptions{OlderThan: week}})
	if !errors.Is(err, source.ErrNoPrivilege) {
		t.Errorf("purge without DELETE: %v, want ErrNoPrivilege", err)
	}
	if n := queryInt(t, e.db, "SELECT COUNT(*) FROM outbox"); n != 3 {
		t.Errorf("%d rows left, want 3", n)
	}
	if _, err := mysql.Optimize(ctx, db, journeyTable); !errors.Is(err, source.ErrNoPrivilege) {
		t.Errorf("optimize without INSERT: %v, want ErrNoPrivilege", err)
	}
}
