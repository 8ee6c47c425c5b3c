package postgres_test

import (
	"cmp"
	"context"
	"errors"
	"fmt"
	"strings"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgconn"
	"github.com/jackc/pgx/v5/pgxpool"

	"github.com/outbox-relay/outbox-relay/internal/fixtures"
	"github.com/outbox-relay/outbox-relay/internal/layout"
	"github.com/outbox-relay/outbox-relay/internal/pgtest"
	"github.com/outbox-relay/outbox-relay/internal/source"
	"github.com/outbox-relay/outbox-relay/internal/source/postgres"
)

var seed001Table = postgres.Table{Schema: "public", Name: "outbox"}

// walSeed001 is a migrated database with seed 001's outbox.
func walSeed001(t *testing.T) (string, *pgxpool.Pool) {
	t.Helper()
	dsn, pool := migrated(t)
	pgtest.Exec(t, pool, fixtures.Seed001)
	return dsn, pool
}

// dropSlotAtEnd drops the source's replication slot when the test ends,
// after its stores are closed: a slot pins WAL, and its database cannot be
// dropped while it exists.
func dropSlotAtEnd(t *testing.T, pool *pgxpool.Pool, src string) {
	t.Cleanup(func() {
		ctx := context.Background()
		name := postgres.WALSlotName(pool.Config().ConnConfig.Database, relaySchema, src)
		_, _ = pool.Exec(ctx, `SELECT pg_terminate_backend(active_pid, 5000) FROM pg_replication_slots WHERE slot_name = $1 AND active_pid IS NOT NULL`, name)
		if _, err := pool.Exec(ctx, `SELECT pg_drop_replication_slot(slot_name) FROM pg_replication_slots WHERE slot_name = $1`, name); err != nil {
			t.Errorf("drop slot %s: %v", name, err)
		}
	})
}

// walSource is seed 001's outbox in a new database and the store of
// source src on it, its slot dropped at the end.
func walSource(t *testing.T, src string) (string, *pgxpool.Pool, *postgres.WALStore) {
	t.Helper()
	dsn, pool := walSeed001(t)
	dropSlotAtEnd(t, pool, src)
	return dsn, pool, newWALStore(t, dsn, pool, src)
}

// newWALStore opens the store of seed 001's outbox read by capture wal,
// closed when the test ends.
func newWALStore(t *testing.T, dsn string, pool *pgxpool.Pool, src string) *postgres.WALStore {
	t.Helper()
	l := resolveLayout(t, pool, seed001Table, "status", layout.Spec{})
	cfg, err := pgconn.ParseConfig(dsn)
	if err != nil {
		t.Fatal(err)
	}
	cfg.RuntimeParams["application_name"] = cmp.Or(pool.Config().ConnConfig.RuntimeParams["application_name"], "outbox-relay wal test")
	st := postgres.NewWAL(pool, postgres.WALOptions{Source: src, Table: seed001Table, RelaySchema: relaySchema,
		Layout: l, Ordering: true, Conn: cfg, FlushEvery: 20 * time.Millisecond, StatusEvery: 50 * time.Millisecond})
	t.Cleanup(st.Close)
	return st
}

// insertTx inserts rows of key (partition key) in one transaction: one
// multi-row INSERT of names, then one INSERT per name of singles. It
// returns pg_current_wal_lsn() after the commit, at or past its end.
func insertTx(t *testing.T, pool *pgxpool.Pool, key string, multi []string, singles ...string) string {
	t.Helper()
	ctx := context.Background()
	ins := `INSERT INTO outbox (aggregate_type, aggregate_id, event_type, topic, partition_key, payload) VALUES `
	row := func(name string) string {
		return fmt.Sprintf(`('order', '00000000-0000-0000-0000-%012d', 'order.created', 'orders', '%s', '{"n": "%s"}')`, len(key), key, name)
	}
	err := pgx.BeginFunc(ctx, pool, func(tx pgx.Tx) error {
		if len(multi) > 0 {
			var vals []string
			for _, n := range multi {
				vals = append(vals, row(n))
			}
			if _, err := tx.Exec(ctx, ins+strings.Join(vals, ", ")); err != nil {
				return err
			}
		}
		for _, n := range singles {
			if _, err := tx.Exec(ctx, ins+row(n)); err != nil {
				return err
			}
		}
		return nil
	})
	if err != nil {
		t.Fatal(err)
	}
	var lsn string
	if err := pool.QueryRow(ctx, `SELECT pg_current_wal_lsn()::text`).Scan(&lsn); err != nil {
		t.Fatal(err)
	}
	return lsn
}

// names are the payloads' "n" of rows.
func names(rows []source.Row) []string {
	out := make([]string, len(rows))
	for i, r := range rows {
		s := string(r.Payload)
		out[i] = s[strings.Index(s, `"n": "`)+6 : strings.LastIndex(s, `"`)]
	}
	return out
}

// claimWAL claims until a batch of at least want rows comes (the stream
// delivers them) or the deadline passes.
func claimWAL(t *testing.T, st source.Store, limit, want int) source.Batch {
	t.Helper()
	deadline := time.Now().Add(30 * time.Second)
	for time.Now().Before(deadline) {
		b, err := st.Claim(context.Background(), limit)
		if err != nil {
			t.Logf("claim: %v", err)
		}
		if b != nil && len(b.Rows()) >= want {
			return b
		}
		if b != nil {
			if err := b.Release(context.Background()); err != nil {
				t.Fatal(err)
			}
		}
		time.Sleep(10 * time.Millisecond) // the claim loop's own poll
	}
	t.Fatal("no rows came from the stream")
	return nil
}

// waitFor polls cond (a query returning one boolean) until it holds.
func waitFor(t *testing.T, pool *pgxpool.Pool, what, cond string, args ...any) {
	t.Helper()
	deadline := time.Now().Add(30 * time.Second)
	for {
		var ok bool
		if err := pool.QueryRow(context.Background(), cond, args...).Scan(&ok); err != nil {
			t.Fatalf("%s: %v", what, err)
		}
		if ok {
			return
		}
		if time.Now().After(deadline) {
			t.Fatalf("timed out waiting until %s", what)
		}
		time.Sleep(10 * time.Millisecond)
	}
}

// slotBefore checks that the slot's confirmed position, once it is the
// one the store sends, is not past lsn.
func slotBefore(t *testing.T, pool *pgxpool.Pool, st *postgres.WALStore, lsn string) {
	t.Helper()
	mem := st.Confirmed()
	waitFor(t, pool, "the slot confirms what the store sends ("+mem+")",
		`SELECT confirmed_flush_lsn >= $2::pg_lsn FROM pg_replication_slots WHERE slot_name = $1`, st.Slot(), mem)
	var before bool
	if err := pool.QueryRow(context.Background(), `SELECT confirmed_flush_lsn <= $2::pg_lsn FROM pg_replication_slots WHERE slot_name = $1`,
		st.Slot(), lsn).Scan(&before); err != nil {
		t.Fatal(err)
	}
	if !before {
		t.Fatalf("the slot confirmed %s or more, past %s: a transaction not yet settled", mem, lsn)
	}
}

// TestWALStreamAndWatermark: rows pending before the slot existed come
// first (read in its snapshot), then each transaction at its commit, its
// rows in insert order (a multi-row INSERT too). The slot confirms no
// transaction before every row of it and of those before it is delivered
// and its table write committed: not when a later key is delivered first,
// not while a delivered row's table write waits.
func TestWALStreamAndWatermark(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	dsn, pool := walSeed001(t)
	dropSlotAtEnd(t, pool, "wm")
	insertTx(t, pool, "a", nil, "a1", "a2")
	st := newWALStore(t, dsn, pool, "wm")

	backlog := claimWAL(t, st, 10, 2)
	if got := names(backlog.Rows()); strings.Join(got, " ") != "a1 a2" {
		t.Fatalf("snapshot's rows %v, want a1 a2", got)
	}
	// Until b's rows are settled, the slot confirms nothing past l0: the
	// snapshot's rows are held meanwhile, so no idle moment lets it go on.
	var l0 string
	if err := pool.QueryRow(ctx, `SELECT pg_current_wal_lsn()::text`).Scan(&l0); err != nil {
		t.Fatal(err)
	}
	insertTx(t, pool, "b", []string{"b1", "b2", "b3"}, "b4")
	l2 := insertTx(t, pool, "c", nil, "c1")
	streamed := claimWAL(t, st, 10, 5)
	if got := names(streamed.Rows()); strings.Join(got, " ") != "b1 b2 b3 b4 c1" {
		t.Fatalf("streamed %v, want b1 b2 b3 b4 c1", got)
	}
	if err := backlog.Complete(ctx, source.Outcome{Published: []int{0, 1}}); err != nil {
		t.Fatal(err)
	}
	// c's transaction is delivered, b's is not: the slot stays before b's.
	if err := streamed.Complete(ctx, source.Outcome{Published: []int{4}}); err != nil {
		t.Fatal(err)
	}
	waitFor(t, pool, "c1 is marked published", `SELECT status = 'published' AND published_at IS NOT NULL FROM outbox WHERE payload->>'n' = 'c1'`)
	slotBefore(t, pool, st, l0)

	// b's rows are delivered while their table write waits on a lock.
	lock, err := pool.Begin(ctx)
	if err != nil {
		t.Fatal(err)
	}
	defer lock.Rollback(ctx)
	if _, err := lock.Exec(ctx, `SELECT 1 FROM outbox WHERE payload->>'n' = 'b1' FOR UPDATE`); err != nil {
		t.Fatal(err)
	}
	again := claimWAL(t, st, 10, 4)
	if got := names(again.Rows()); strings.Join(got, " ") != "b1 b2 b3 b4" {
		t.Fatalf("claimed again %v, want b1 b2 b3 b4", got)
	}
	if err := again.Complete(ctx, source.Outcome{Published: []int{0, 1, 2, 3}}); err != nil {
		t.Fatal(err)
	}
	waitFor(t, pool, "the table write waits on the lock", `SELECT EXISTS (SELECT 1 FROM pg_stat_activity
WHERE datname = current_database() AND wait_event_type = 'Lock' AND query LIKE 'UPDATE%')`)
	slotBefore(t, pool, st, l0)
	if err := lock.Rollback(ctx); err != nil {
		t.Fatal(err)
	}
	waitFor(t, pool, "the slot confirms past c's transaction",
		`SELECT confirmed_flush_lsn >= $2::pg_lsn FROM pg_replication_slots WHERE slot_name = $1`, st.Slot(), l2)
	waitFor(t, pool, "every row is marked published", `SELECT count(*) = 0 FROM outbox WHERE status <> 'published'`)
}

// TestWALResume: the store's connections are killed mid-way; the store
// opened again resumes from the slot: every row is delivered, each key's
// rows in insert order, and only rows that were in flight come twice.
func TestWALResume(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	dsn, pool := walSeed001(t)
	dropSlotAtEnd(t, pool, "resume")
	keys := []string{"k1", "k22", "k333"}
	const perKey = 40
	// Half the rows before the slot exists, half after.
	insert := func(from, to int) {
		for i := from; i < to; i++ {
			for _, k := range keys {
				insertTx(t, pool, k, []string{fmt.Sprintf("%s-%03d", k, i)})
			}
		}
	}
	insert(0, perKey/2)
	storePool := pgtest.Pool(t, dsn, "outbox-relay wal test")
	st := newWALStore(t, dsn, storePool, "resume")
	delivered := map[string]int{}
	var order []string
	publish := func(st source.Store, limit int) source.Batch {
		b := claimWAL(t, st, limit, 1)
		n := names(b.Rows())
		order = append(order, n...)
		for _, name := range n {
			delivered[name]++
		}
		return b
	}
	b := publish(st, 25)
	if err := b.Complete(ctx, source.Outcome{Published: seq(len(b.Rows()))}); err != nil {
		t.Fatal(err)
	}
	insert(perKey/2, perKey)
	inFlight := publish(st, 25) // delivered, never completed
	pgtest.Exec(t, pool, `SELECT pg_terminate_backend(pid) FROM pg_stat_activity
WHERE datname = current_database() AND application_name = 'outbox-relay wal test'`)
	if err := inFlight.Complete(ctx, source.Outcome{Published: seq(len(inFlight.Rows()))}); err == nil {
		t.Log("the in-flight batch completed before the stream noticed")
	}
	st.Close()

	st = newWALStore(t, dsn, pgtest.Pool(t, dsn, "outbox-relay wal test"), "resume")
	total := perKey * len(keys)
	for len(delivered) < total {
		b := publish(st, 25)
		if err := b.Complete(ctx, source.Outcome{Published: seq(len(b.Rows()))}); err != nil {
			t.Logf("complete: %v", err)
		}
	}
	dups := 0
	for _, n := range delivered {
		dups += n - 1
	}
	if dups > 50 {
		t.Errorf("%d rows delivered twice; at most the 50 in flight may be", dups)
	}
	// Per key, first deliveries come in insert order.
	last := map[string]string{}
	seen := map[string]bool{}
	for _, name := range order {
		if seen[name] {
			continue
		}
		seen[name] = true
		k := name[:strings.Index(name, "-")]
		if name < last[k] {
			t.Fatalf("%s delivered after %s", name, last[k])
		}
		last[k] = name
	}
	waitFor(t, pool, "every row is marked published", `SELECT count(*) = 0 FROM outbox WHERE status <> 'published'`)
}

func seq(n int) []int {
	out := make([]int, n)
	for i := range out {
		out[i] = i
	}
	return out
}

// TestWALWholeTransactions: a transaction is released at its commit, whole:
// no claim sees part of one, however long it takes to stream.
func TestWALWholeTransactions(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	_, pool, st := walSource(t, "whole")
	if b, err := st.Claim(ctx, 10); err != nil || b != nil {
		t.Fatalf("claim of an empty table: %v, %v", b, err)
	}
	waitFor(t, pool, "the slot is streamed", `SELECT EXISTS (SELECT 1 FROM pg_replication_slots s
JOIN pg_stat_replication r ON r.pid = s.active_pid WHERE s.slot_name = $1 AND r.state = 'streaming')`, st.Slot())
	const n = 20000
	pgtest.Exec(t, pool, fmt.Sprintf(`INSERT INTO outbox (aggregate_type, aggregate_id, event_type, topic, partition_key, payload)
SELECT 'order', gen_random_uuid(), 'order.created', 'orders', 'k', jsonb_build_object('n', lpad(i::text, 6, '0'))
FROM generate_series(1, %d) i`, n))
	deadline := time.Now().Add(60 * time.Second)
	for time.Now().Before(deadline) {
		b, err := st.Claim(ctx, 2*n)
		if err != nil {
			t.Fatal(err)
		}
		if b == nil {
			continue
		}
		got := names(b.Rows())
		if len(got) != n {
			t.Fatalf("a claim took %d rows of a transaction of %d", len(got), n)
		}
		for i, name := range got {
			if name != fmt.Sprintf("%06d", i+1) {
				t.Fatalf("row %d is %s: not in insert order", i, name)
			}
		}
		return
	}
	t.Fatal("the transaction never came")
}

// TestWALResumeSkipsSettled: a row backing off holds the slot before its
// transaction, and the rows after it are delivered meanwhile. A store that
// resumes from the slot gets those transactions again: the rows settled
// before (delivered and written) are not handed out twice, and the row
// backing off keeps its attempts and waits until due.
func TestWALResumeSkipsSettled(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	dsn, pool, st := walSource(t, "skip")
	if _, err := st.Claim(ctx, 10); err != nil {
		t.Fatal(err)
	}
	waitFor(t, pool, "the slot's snapshot is relayed", `SELECT EXISTS (SELECT 1 FROM pg_publication WHERE pubname = $1 AND obj_description(oid, 'pg_publication') LIKE '%are relayed%')`, st.Name())
	insertTx(t, pool, "a", nil, "a1")
	insertTx(t, pool, "b", nil, "b1")
	end := insertTx(t, pool, "b", nil, "b2")
	b := claimWAL(t, st, 10, 3)
	if got := names(b.Rows()); strings.Join(got, " ") != "a1 b1 b2" {
		t.Fatalf("streamed %v, want a1 b1 b2", got)
	}
	err := b.Complete(ctx, source.Outcome{Published: []int{1, 2},
		Retry: []source.Retry{{Index: 0, Attempts: 1, At: time.Now().Add(time.Hour), Err: "broker said no"}}})
	if err != nil {
		t.Fatal(err)
	}
	waitFor(t, pool, "b's rows are marked published", `SELECT count(*) = 2 FROM outbox WHERE status = 'published'`)
	slotBefore(t, pool, st, end)
	st.Close()

	st = newWALStore(t, dsn, pool, "skip")
	if _, err := st.Claim(ctx, 10); err != nil {
		t.Fatal(err)
	}
	// A row written now comes after the ones brought again: once it is
	// claimed, those were all seen.
	insertTx(t, pool, "c", nil, "c1")
	b = claimWAL(t, st, 10, 1)
	if got := names(b.Rows()); strings.Join(got, " ") != "c1" {
		t.Fatalf("after the resume: %v, want c1 alone (b1 and b2 were delivered, a1 waits an hour)", got)
	}
}

// TestWALDeposedHolderFenced: a holder deposed while its batch is out
// records nothing of it, claims nothing more, and neither drops nor ends the
// new holder's slot; the new holder relays every row.
func TestWALDeposedHolderFenced(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	dsn, pool := walSeed001(t)
	dropSlotAtEnd(t, pool, "fence")
	for _, k := range []string{"a", "b", "c", "d"} {
		insertTx(t, pool, k, nil, k+"1")
	}
	acquire := func(owner string) *source.Lease {
		l, err := postgres.NewLeases(pool, relaySchema, owner+"-"+pgtest.Suffix()).Acquire(ctx, "fence", time.Minute)
		if err != nil || l == nil {
			t.Fatalf("%s acquires: %v %v", owner, l, err)
		}
		return l
	}
	a := newWALStore(t, dsn, pgtest.Pool(t, dsn, "outbox-relay wal test a"), "fence")
	a.Fence.Set(acquire("a"))
	b1 := claimWAL(t, a, 10, 4)
	pgtest.Exec(t, pool, `UPDATE outbox_relay.leases SET expires_at = now() - interval '1 second'`)
	lb := acquire("b")
	err := b1.Complete(ctx, source.Outcome{Published: []int{0},
		Dead: []source.Dead{{Index: 1, Attempts: 1, Reason: "refused", PayloadIsJSON: true}}})
	if !errors.Is(err, source.ErrLeaseLost) {
		t.Fatalf("the deposed holder's Complete = %v, want ErrLeaseLost", err)
	}
	deposed := func() {
		t.Helper()
		deadline := time.Now().Add(30 * time.Second)
		for {
			b, err := a.Claim(ctx, 10)
			if b != nil {
				t.Fatalf("the deposed holder claimed %v", names(b.Rows()))
			}
			if errors.Is(err, source.ErrLeaseLost) {
				return
			}
			if time.Now().After(deadline) {
				t.Fatalf("the deposed holder's claims never failed: %v", err)
			}
			time.Sleep(10 * time.Millisecond)
		}
	}
	deposed()
	b := newWALStore(t, dsn, pgtest.Pool(t, dsn, "outbox-relay wal test b"), "fence")
	b.Fence.Set(lb)
	got := claimWAL(t, b, 10, 4)
	// The deposed holder tries again meanwhile: the slot and its stream
	// are the new holder's.
	deposed()
	deposed()
	if err := got.Complete(ctx, source.Outcome{Published: seq(4)}); err != nil {
		t.Fatal(err)
	}
	waitFor(t, pool, "every row is marked published", `SELECT count(*) = 0 FROM outbox WHERE status <> 'published'`)
	var dead int
	if err := pool.QueryRow(ctx, `SELECT count(*) FROM outbox_relay.failed_events`).Scan(&dead); err != nil || dead != 0 {
		t.Fatalf("%d dead letters (%v): the deposed holder's outcome was recorded", dead, err)
	}
	waitFor(t, pool, "the new holder streams the slot, its rows relayed", `SELECT EXISTS (SELECT 1 FROM pg_replication_slots s JOIN pg_stat_replication r ON r.pid = s.active_pid
WHERE s.slot_name = $1 AND r.application_name = 'outbox-relay wal test b'
  AND obj_description((SELECT oid FROM pg_publication WHERE pubname = $2), 'pg_publication') LIKE '%are relayed%')`, b.Slot(), b.Name())
}

// TestWALReplay: a dead letter replayed comes back through the stream (an
// insert of its row), and is relayed again.
func TestWALReplay(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	_, pool, st := walSource(t, "replay")
	if _, err := st.Claim(ctx, 10); err != nil {
		t.Fatal(err)
	}
	waitFor(t, pool, "the slot is streamed", `SELECT EXISTS (SELECT 1 FROM pg_replication_slots s
JOIN pg_stat_replication r ON r.pid = s.active_pid WHERE s.slot_name = $1 AND r.state = 'streaming')`, st.Slot())
	insertTx(t, pool, "a", nil, "a1", "a2")
	b := claimWAL(t, st, 10, 2)
	err := b.Complete(ctx, source.Outcome{Published: []int{1},
		Dead: []source.Dead{{Index: 0, Attempts: 1, Reason: "refused", PayloadIsJSON: true, HeadersAreJSON: true}}})
	if err != nil {
		t.Fatal(err)
	}
	waitFor(t, pool, "a1 failed and a2 published", `SELECT count(*) = 2 FROM outbox WHERE status = 'failed' AND payload->>'n' = 'a1' OR status = 'published' AND payload->>'n' = 'a2'`)
	dead, err := postgres.ListFailed(ctx, pool, relaySchema, source.DLQFilter{Source: "replay"})
	if err != nil || len(dead) != 1 {
		t.Fatalf("dead letters: %v %v", dead, err)
	}
	if n, err := st.Replay(ctx, dead, "test"); err != nil || n != 1 {
		t.Fatalf("replay: %d %v", n, err)
	}
	again := claimWAL(t, st, 10, 1)
	if got := names(again.Rows()); strings.Join(got, " ") != "a1" || again.Rows()[0].ID != b.Rows()[0].ID {
		t.Fatalf("after the replay: %v, want a1 with its id", got)
	}
	if err := again.Complete(ctx, source.Outcome{Published: []int{0}}); err != nil {
		t.Fatal(err)
	}
	waitFor(t, pool, "every row is marked published", `SELECT count(*) = 0 FROM outbox WHERE status <> 'published'`)
}

// TestWALCheck: what check says of a source read by capture wal: nothing
// lacking on this server (wal_level logical, a superuser), then its slot,
// not made and then streamed; a role without REPLICATION is told so.
func TestWALCheck(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	dsn, pool, st := walSource(t, "check")
	problems, notes, err := st.CheckWAL(ctx)
	if err != nil || len(problems) != 0 || len(notes) != 1 || !strings.Contains(notes[0], "not made yet") {
		t.Fatalf("before the first claim: %v %v %v", problems, notes, err)
	}
	if _, err := st.Claim(ctx, 10); err != nil {
		t.Fatal(err)
	}
	waitFor(t, pool, "the slot is streamed", `SELECT EXISTS (SELECT 1 FROM pg_replication_slots WHERE slot_name = $1 AND active)`, st.Slot())
	problems, notes, err = st.CheckWAL(ctx)
	if err != nil || len(problems) != 0 || len(notes) != 1 || !strings.Contains(notes[0], ": streamed,") {
		t.Fatalf("streamed: %v %v %v", problems, notes, err)
	}
	role := "walcheck_" + pgtest.Suffix()
	pgtest.Exec(t, pool, "CREATE ROLE "+role+" LOGIN")
	t.Cleanup(func() { _, _ = pool.Exec(context.Background(), "DROP ROLE "+role) })
	weak := pgtest.Pool(t, pgtest.WithUser(t, dsn, role), "outbox-relay wal check")
	problems, _, err = postgres.NewWAL(weak, postgres.WALOptions{Source: "check", Table: seed001Table, RelaySchema: relaySchema,
		Layout: resolveLayout(t, pool, seed001Table, "status", layout.Spec{}), Conn: weak.Config().ConnConfig.Config.Copy()}).CheckWAL(ctx)
	if err != nil || len(problems) != 1 || !strings.Contains(problems[0], "may not replicate") {
		t.Fatalf("a role without REPLICATION: %v %v", problems, err)
	}
}

// TestWALSlotGauges: a wal store's stats carry its slot's gauges once the
// slot exists (none before): the WAL the slot keeps and the WAL written
// since its confirmed position, both above zero while a streamed
// transaction is not settled.
func TestWALSlotGauges(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	dsn, pool := walSeed001(t)
	dropSlotAtEnd(t, pool, "gauges")
	st := newWALStore(t, dsn, pool, "gauges")
	g, err := st.RecordStats(ctx, source.Stats{})
	if err != nil {
		t.Fatal(err)
	}
	if g.Slot != nil {
		t.Fatalf("gauges of a slot not made yet: %+v", *g.Slot)
	}
	insertTx(t, pool, "a", nil, "a1")
	b := claimWAL(t, st, 10, 1)
	defer func() { _ = b.Release(ctx) }()
	insertTx(t, pool, "b", nil, "b1", "b2")
	if g, err = st.RecordStats(ctx, source.Stats{}); err != nil {
		t.Fatal(err)
	}
	if g.Slot == nil || g.Slot.LagBytes <= 0 || g.Slot.RetainedBytes < g.Slot.LagBytes {
		t.Fatalf("slot gauges %+v, want WAL kept and written since the confirmed position, both above zero", g.Slot)
	}
}
