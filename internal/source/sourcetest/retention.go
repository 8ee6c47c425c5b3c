package sourcetest

import (
	"testing"
	"time"

	"github.com/outbox-relay/outbox-relay/internal/source"
)

// purge runs retention on tbl for src and fails the test on error.
func purge(t *testing.T, tbl RetainedTable, src string, o source.PurgeOptions) source.PurgeResult {
	t.Helper()
	res, err := tbl.Purge(t, src, o)
	if err != nil {
		t.Fatalf("purge: %v", err)
	}
	return res
}

// oldDelivered makes a table with n rows delivered long ago.
func (s *suite) oldDelivered(t *testing.T, n int) (RetainedTable, string, []string) {
	t.Helper()
	tbl, src := s.retainedTable(t)
	id := tbl.Insert(t, rows(n, 1000)...)
	st := tbl.Open(t, Options{Source: src})
	publishAll(t, claim(t, st, n))
	for _, i := range id {
		tbl.Backdate(t, i, 2*retentionAge)
	}
	return tbl, src, id
}

// retentionAge is the age the retention cases purge at; old rows are
// backdated by twice as much.
const retentionAge = time.Hour

// testRetention: a retention run deletes the delivered rows older than the
// cutoff, in batches, and dead-lettered ones only when asked; pending,
// claimed and backing-off rows and newer rows are never deleted, and a dry
// run counts without deleting. A layout that deletes its rows is left
// alone.
func (s *suite) testRetention(t *testing.T) {
	tbl, src := s.retainedTable(t)
	// 0 delivered long ago, 1 delivered now, 2 pending and claimed, 3
	// backing off, 4 dead-lettered, 5 pending.
	id := tbl.Insert(t, rows(6, 700)...)
	st := tbl.Open(t, Options{Source: src})
	b := claim(t, st, 5)
	complete(t, b, source.Outcome{
		Published: []int{0, 1},
		Retry:     []source.Retry{{Index: 3, Attempts: 1, At: time.Now().Add(time.Hour), Err: "broker down"}},
		Dead:      []source.Dead{{Index: 4, Attempts: 3, Reason: "boom", PayloadIsJSON: true, Exhausted: true}},
	})
	for _, i := range []int{0, 2, 3, 4, 5} {
		tbl.Backdate(t, id[i], 2*retentionAge)
	}
	held := claim(t, st, 1)
	if got := ids(held); len(got) != 1 || got[0] != id[2] {
		t.Fatalf("claimed %v, want [%s]", got, id[2])
	}
	defer release(t, held)

	there := func(want ...bool) {
		t.Helper()
		for i, w := range want {
			if got := tbl.State(t, id[i]).Exists; got != w {
				t.Errorf("row %d (%s) there = %v, want %v", i, id[i], got, w)
			}
		}
	}
	opts := source.PurgeOptions{OlderThan: retentionAge, BatchSize: 2}
	if s.exp.deletes {
		res := purge(t, tbl, src, opts)
		if !res.KeptByLayout || res.Published != 0 || res.Dead != 0 || res.Batches != 0 {
			t.Errorf("purge of a table whose layout deletes its rows = %+v, want it kept by the layout", res)
		}
		there(false, false, true, true, false, true)
		return
	}
	dry := opts
	dry.DryRun = true
	if res := purge(t, tbl, src, dry); res.Published != 1 || res.Dead != 0 {
		t.Errorf("dry run = %+v, want 1 delivered row counted", res)
	}
	dry.IncludeDead = true
	if res := purge(t, tbl, src, dry); res.Published != 1 || res.Dead != 1 {
		t.Errorf("dry run with the dead = %+v, want 1 delivered and 1 dead row counted", res)
	}
	there(true, true, true, true, true, true)

	if res := purge(t, tbl, src, opts); res.Published != 1 || res.Dead != 0 || res.Batches != 1 {
		t.Errorf("purge = %+v, want 1 delivered row deleted in 1 batch", res)
	}
	there(false, true, true, true, true, true)

	opts.IncludeDead = true
	if res := purge(t, tbl, src, opts); res.Published != 0 || res.Dead != 1 {
		t.Errorf("purge with the dead = %+v, want 1 dead row deleted", res)
	}
	there(false, true, true, true, false, true)
	if got := tbl.ListFailed(t, source.DLQFilter{Source: src}); len(got) != 1 {
		t.Errorf("dead letters after the purge = %v, want the dead row's kept", eventIDs(got))
	}
}

// testRetentionReplayed: a retention run deletes the dead letters replayed
// before the cutoff with their audit rows, and keeps the ones replayed
// since and the ones not replayed; a dry run counts them.
func (s *suite) testRetentionReplayed(t *testing.T) {
	tbl, src := s.retainedTable(t)
	id := tbl.Insert(t, rows(3, 800)...)
	st := tbl.Open(t, Options{Source: src})
	for range id {
		deadLetter(t, st, "boom")
	}
	dl := tbl.ListFailed(t, source.DLQFilter{Source: src})
	if len(dl) != 3 {
		t.Fatalf("dead letters = %v, want 3", eventIDs(dl))
	}
	if n, err := st.Replay(t.Context(), dl[:2], "sourcetest"); err != nil || n != 2 {
		t.Fatalf("replay = %d, %v", n, err)
	}
	tbl.BackdateReplay(t, dl[0].ID, 2*retentionAge)

	opts := source.PurgeOptions{OlderThan: retentionAge, DryRun: true}
	if res := purge(t, tbl, src, opts); res.FailedEvents != 1 || res.Audit != 1 {
		t.Errorf("dry run = %+v, want 1 dead letter and 1 audit row counted", res)
	}
	if got := tbl.ListFailed(t, source.DLQFilter{Source: src, IncludeReplayed: true}); len(got) != 3 {
		t.Errorf("dry run deleted dead letters: %v left", eventIDs(got))
	}
	opts.DryRun = false
	if res := purge(t, tbl, src, opts); res.FailedEvents != 1 || res.Audit != 1 {
		t.Errorf("purge = %+v, want 1 dead letter and 1 audit row deleted", res)
	}
	got := tbl.ListFailed(t, source.DLQFilter{Source: src, IncludeReplayed: true})
	if ev := eventIDs(got); len(ev) != 2 || ev[0] != id[1] || ev[1] != id[2] {
		t.Errorf("dead letters after the purge = %v, want %v", ev, id[1:])
	}
	if a := tbl.Audit(t, dl[0].ID); len(a) != 0 {
		t.Errorf("audit of the pruned dead letter = %v, want none", a)
	}
	if a := tbl.Audit(t, dl[1].ID); len(a) != 1 {
		t.Errorf("audit of the dead letter replayed since = %v, want its replay", a)
	}
	if r := tbl.State(t, id[0]); !r.Exists || !r.Pending {
		t.Errorf("replayed row %s: %+v, want pending", id[0], r)
	}
}

// testRetentionLockRetry: a batch that gives up waiting for a table lock is
// tried again after the pause, and goes through once the lock is gone.
func (s *suite) testRetentionLockRetry(t *testing.T) {
	if s.exp.deletes {
		t.Skip("the layout deletes its rows: retention leaves the table alone")
	}
	tbl, src, id := s.oldDelivered(t, 1)
	unlock := tbl.LockTable(t)
	// MySQL counts lock timeouts in whole seconds: one second for both,
	// and the lock held a little longer.
	go func() {
		time.Sleep(1500 * time.Millisecond)
		unlock()
	}()
	res := purge(t, tbl, src, source.PurgeOptions{OlderThan: retentionAge, LockTimeout: time.Second, Pause: 50 * time.Millisecond})
	if res.Published != 1 || tbl.State(t, id[0]).Exists {
		t.Errorf("purge after a lock timeout = %+v, want the delivered row deleted", res)
	}
}

// testRetentionGivesUp: while a lock that forbids deletes is held on the
// table, each batch waits at most the lock timeout and the run fails after
// a few tries instead of queueing behind it.
func (s *suite) testRetentionGivesUp(t *testing.T) {
	if s.exp.deletes {
		t.Skip("the layout deletes its rows: retention leaves the table alone")
	}
	tbl, src, _ := s.oldDelivered(t, 2)
	defer tbl.LockTable(t)()
	start := time.Now()
	_, err := tbl.Purge(t, src, source.PurgeOptions{OlderThan: retentionAge, LockTimeout: time.Second, Pause: 20 * time.Millisecond})
	if err == nil {
		t.Fatal("purge succeeded while the table was locked")
	}
	if took := time.Since(start); took > 15*time.Second {
		t.Errorf("purge took %s to give up", took)
	}
}

// testRetentionSkipsLockedRows: a row another transaction holds (a replay,
// an application's update) is skipped rather than waited for, and the rest
// is purged at once.
func (s *suite) testRetentionSkipsLockedRows(t *testing.T) {
	if s.exp.deletes {
		t.Skip("the layout deletes its rows: retention leaves the table alone")
	}
	tbl, src, id := s.oldDelivered(t, 9)
	unlock := tbl.LockRow(t, id[4])
	defer unlock()
	start := time.Now()
	res := purge(t, tbl, src, source.PurgeOptions{OlderThan: retentionAge, BatchSize: 3, LockTimeout: 3 * time.Second})
	if took := time.Since(start); took > 2*time.Second {
		t.Errorf("purge took %s beside a held row", took)
	}
	if res.Published != 8 {
		t.Errorf("deleted %d rows, want 8 (all but the held one)", res.Published)
	}
	unlock()
	if !tbl.State(t, id[4]).Exists {
		t.Error("the held row was deleted")
	}
}

// testRetentionRetryState: a retention run deletes the retry state of rows
// no longer in the table, whatever their age, and keeps that of rows still
// there; a dry run counts it.
func (s *suite) testRetentionRetryState(t *testing.T) {
	tbl, src := s.retainedTable(t)
	id := tbl.Insert(t, rows(2, 1100)...)
	st := tbl.Open(t, Options{Source: src})
	at := time.Now().Add(time.Hour)
	complete(t, claim(t, st, 2), source.Outcome{Retry: []source.Retry{
		{Index: 0, Attempts: 1, At: at, Err: "broker down"},
		{Index: 1, Attempts: 1, At: at, Err: "broker down"},
	}})
	tbl.DeleteRow(t, id[0])
	opts := source.PurgeOptions{OlderThan: retentionAge, DryRun: true}
	if res := purge(t, tbl, src, opts); res.RetryState != 1 {
		t.Errorf("dry run = %+v, want the retry state of 1 deleted row counted", res)
	}
	opts.DryRun = false
	if res := purge(t, tbl, src, opts); res.RetryState != 1 {
		t.Errorf("purge = %+v, want the retry state of 1 deleted row deleted", res)
	}
	if res := purge(t, tbl, src, opts); res.RetryState != 0 {
		t.Errorf("second purge = %+v, want no retry state left to delete", res)
	}
	// The row still there keeps its backoff: it is not claimable before
	// its time.
	if b := claim(t, st, 10); b != nil {
		got := ids(b)
		release(t, b)
		t.Errorf("claimed %v: the retry state of a row still there was deleted", got)
	}
}

// testSettledForgetRetryState: a row that backed off and is then delivered
// or dead-lettered leaves no retry state behind (the completion removes it
// in its transaction), so retention finds none to prune once the rows are
// gone.
func (s *suite) testSettledForgetRetryState(t *testing.T) {
	tbl, src := s.retainedTable(t)
	id := tbl.Insert(t, rows(2, 1150)...)
	st := tbl.Open(t, Options{Source: src})
	past := time.Now().Add(-time.Second)
	complete(t, claim(t, st, 2), source.Outcome{Retry: []source.Retry{
		{Index: 0, Attempts: 1, At: past, Err: "broker down"},
		{Index: 1, Attempts: 1, At: past, Err: "broker down"},
	}})
	b := claim(t, st, 2)
	if got := ids(b); len(got) != 2 {
		release(t, b)
		t.Fatalf("claimed %v after the backoff, want both rows", got)
	}
	complete(t, b, source.Outcome{Published: []int{0},
		Dead: []source.Dead{{Index: 1, Attempts: 2, Reason: "boom", PayloadIsJSON: true, Exhausted: true}}})
	if s.caps.TableUntouched {
		// No retention: the rows' states say whether a retry state is
		// left (a row with one reads as pending).
		if p, d := tbl.State(t, id[0]), tbl.State(t, id[1]); !p.Published || p.Pending || !d.Failed || d.Pending {
			t.Errorf("settled rows %+v and %+v, want published and failed, neither pending", p, d)
		}
		return
	}
	for _, i := range id {
		tbl.DeleteRow(t, i)
	}
	if res := purge(t, tbl, src, source.PurgeOptions{OlderThan: retentionAge, DryRun: true}); res.RetryState != 0 {
		t.Errorf("dry run = %+v: retry state of settled rows was left behind", res)
	}
}

// retainedTable makes a table whose dead letters and retention the suite
// can drive, or skips the case.
func (s *suite) retainedTable(t *testing.T) (RetainedTable, string) {
	t.Helper()
	tbl, src := s.newTable(t)
	rt, ok := tbl.(RetainedTable)
	if !ok {
		t.Skip("the store's table keeps no dead letters nor retention the suite can drive")
	}
	return rt, src
}
