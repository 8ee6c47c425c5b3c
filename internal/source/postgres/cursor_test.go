package postgres_test

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"slices"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgconn"
	"github.com/jackc/pgx/v5/pgxpool"

	"github.com/outbox-relay/outbox-relay/internal/layout"
	"github.com/outbox-relay/outbox-relay/internal/lease"
	"github.com/outbox-relay/outbox-relay/internal/pgtest"
	"github.com/outbox-relay/outbox-relay/internal/source"
	"github.com/outbox-relay/outbox-relay/internal/source/postgres"
)

// historyTable is an append-only table with an xid column and the index a
// cursor reads it by.
const historyTable = `CREATE TABLE public.history (
  id BIGSERIAL PRIMARY KEY,
  tx XID8 NOT NULL DEFAULT pg_current_xact_id(),
  k TEXT NOT NULL,
  payload JSONB NOT NULL);
CREATE INDEX history_tx ON public.history (tx, id)`

var historyName = postgres.Table{Schema: "public", Name: "history"}

// historyDB is a migrated database with public.history and rows of it
// (statements run after the table's).
func historyDB(t *testing.T, rows ...string) (string, *pgxpool.Pool) {
	t.Helper()
	dsn, pool := migrated(t)
	pgtest.Exec(t, pool, append([]string{historyTable}, rows...)...)
	return dsn, pool
}

// column reads the first column of q's rows as text.
func column(t *testing.T, pool *pgxpool.Pool, q string, args ...any) []string {
	t.Helper()
	rows, err := pool.Query(context.Background(), q, args...)
	if err != nil {
		t.Fatal(err)
	}
	out, err := pgx.CollectRows(rows, pgx.RowTo[string])
	if err != nil {
		t.Fatal(err)
	}
	return out
}

// openHistory opens a cursor store on public.history for source src, on
// pool.
func openHistory(t *testing.T, pool *pgxpool.Pool, src string, ordering bool) *postgres.CursorStore {
	t.Helper()
	ctx := context.Background()
	cols, err := postgres.Columns(ctx, pool, historyName)
	if err != nil {
		t.Fatal(err)
	}
	merged, explicit, err := layout.MergeUntouched("", layout.Spec{ID: "id", Payload: "payload", Key: "{k}", Topic: "history", XIDColumn: "tx"}, "")
	if err != nil {
		t.Fatal(err)
	}
	l, err := layout.Resolve(merged, explicit, historyName.String(), cols)
	if err != nil {
		t.Fatal(err)
	}
	st, err := postgres.OpenCursor(ctx, pool, historyName, cols, postgres.CursorOptions{Source: src, RelaySchema: relaySchema,
		Layout: l, Ordering: ordering})
	if err != nil {
		t.Fatal(err)
	}
	return st
}

// execer runs a statement: a pool or a transaction.
type execer interface {
	Exec(ctx context.Context, sql string, args ...any) (pgconn.CommandTag, error)
}

// insertHistory inserts rows of key k with payloads {"n": n} for each n,
// in one statement each.
func insertHistory(t *testing.T, q execer, k string, ns ...int) {
	t.Helper()
	for _, n := range ns {
		if _, err := q.Exec(context.Background(), `INSERT INTO public.history (k, payload) VALUES ($1, jsonb_build_object('n', $2::int))`, k, n); err != nil {
			t.Fatal(err)
		}
	}
}

// payloadN reads a row's {"n": n}.
func payloadN(t *testing.T, r source.Row) int {
	t.Helper()
	var p struct{ N int }
	if err := json.Unmarshal(r.Payload, &p); err != nil {
		t.Fatalf("payload %s: %v", r.Payload, err)
	}
	return p.N
}

// drain claims and publishes every row it can, limit at a time, and
// returns the payloads' numbers in the order claimed.
func drain(t *testing.T, st source.Store, limit int) []int {
	t.Helper()
	out, err := drainRows(st, limit)
	if err != nil {
		t.Fatal(err)
	}
	return out
}

func drainRows(st source.Store, limit int) ([]int, error) {
	var out []int
	for {
		b, err := st.Claim(context.Background(), limit)
		if err != nil || b == nil {
			return out, err
		}
		for _, r := range b.Rows() {
			var p struct{ N int }
			if err := json.Unmarshal(r.Payload, &p); err != nil {
				return out, fmt.Errorf("payload %s: %w", r.Payload, err)
			}
			out = append(out, p.N)
		}
		if err := b.Complete(context.Background(), source.Outcome{Published: all(b)}); err != nil {
			return out, err
		}
	}
}

// TestCursorLateCommit: a transaction that began first and inserted first
// commits last, while claims run and move the position on past the rows
// committed around it, twice over (its rows then come in a range taken in
// part). None of its rows is passed over: each is claimed once, in its
// own statements' order, once it has committed.
func TestCursorLateCommit(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	_, pool := historyDB(t)
	st := openHistory(t, pool, "late", true)

	late, err := pool.Begin(ctx) // a connection of its own, held open
	if err != nil {
		t.Fatal(err)
	}
	defer func() { _ = late.Rollback(ctx) }()
	insertHistory(t, late, "L", 1, 2) // the oldest transaction of all
	insertHistory(t, pool, "a", 10, 11, 12)
	if got := drain(t, st, 2); !slices.Equal(got, []int{10, 11, 12}) {
		t.Fatalf("claimed %v while the late transaction is open, want [10 11 12]", got)
	}
	// A range taken in part while the late transaction is still open: its
	// bound holds the late transaction in progress too.
	insertHistory(t, pool, "b", 20, 21, 22)
	b, err := st.Claim(ctx, 2)
	if err != nil || b == nil {
		t.Fatalf("claim: %v, %v", b, err)
	}
	publish(t, b)
	if err := late.Commit(ctx); err != nil {
		t.Fatal(err)
	}
	insertHistory(t, pool, "c", 30)
	got := drain(t, st, 2)
	// 22 ends the range taken in part, whose bound did not see the late
	// transaction committed; the next range holds it and 30, in
	// transaction order.
	if want := []int{22, 1, 2, 30}; !slices.Equal(got, want) {
		t.Fatalf("after the late commit claimed %v, want %v", got, want)
	}
	if got := drain(t, openHistory(t, pool, "late", true), 10); len(got) != 0 {
		t.Fatalf("a new store on the position recorded claimed %v again", got)
	}
}

// TestCursorLateCommitWhileClaiming: rows committed by many transactions
// while claims run (in a loop beside them), one of them begun before all
// the others and held open until the end: every row is claimed exactly
// once.
func TestCursorLateCommitWhileClaiming(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	_, pool := historyDB(t)
	st := openHistory(t, pool, "busy", true)
	late, err := pool.Begin(ctx)
	if err != nil {
		t.Fatal(err)
	}
	defer func() { _ = late.Rollback(ctx) }()
	insertHistory(t, late, "L", -1)
	stop := make(chan struct{})
	claimed := make(chan []int)
	go func() {
		var got []int
		for {
			more, err := drainRows(st, 7)
			got = append(got, more...)
			if err != nil {
				t.Error(err)
			}
			select {
			case <-stop:
				more, err := drainRows(st, 7)
				if err != nil {
					t.Error(err)
				}
				claimed <- append(got, more...)
				return
			case <-time.After(5 * time.Millisecond):
			}
		}
	}()
	const n = 300
	for i := range n {
		insertHistory(t, pool, fmt.Sprint("k", i%7), i)
		if i == n/2 {
			if err := late.Commit(ctx); err != nil {
				t.Fatal(err)
			}
		}
	}
	time.Sleep(100 * time.Millisecond)
	close(stop)
	seen := map[int]int{}
	for _, n := range <-claimed {
		seen[n]++
	}
	onceEach(t, seen, -1, n-1)
}

// onceEach checks that every number from first to last was counted once.
func onceEach(t *testing.T, counts map[int]int, first, last int) {
	t.Helper()
	for i := first; i <= last; i++ {
		if counts[i] != 1 {
			t.Errorf("row %d claimed %d times by batches that completed, want once", i, counts[i])
		}
	}
}

// TestCursorResumesAfterKill: a relay killed with batches in flight (its
// connections cut) loses nothing: a new store resumes from the position
// the completed batches recorded, and claims again only the rows of the
// batches that were in flight.
func TestCursorResumesAfterKill(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	dsn, pool := historyDB(t, `INSERT INTO public.history (k, payload) SELECT 'k' || (g % 3), jsonb_build_object('n', g) FROM generate_series(1, 25) g`)
	delivered := map[int]int{}
	record := func(b source.Batch) {
		for _, r := range b.Rows() {
			delivered[payloadN(t, r)]++
		}
	}
	for round, killAfter := range []int{0, 1, 2} {
		relay, k := pgtest.OwnPool(t, dsn, pool)
		st := openHistory(t, relay, "kill", true)
		// Three batches in flight, as a relay with a pipeline of three
		// has; the first killAfter of them complete, then the relay dies.
		var flight []source.Batch
		for range 3 {
			b, err := st.Claim(ctx, 3)
			if err != nil {
				t.Fatal(err)
			}
			if b != nil {
				flight = append(flight, b)
			}
		}
		for i, b := range flight {
			if i == killAfter {
				k.Kill(t)
			}
			err := b.Complete(ctx, source.Outcome{Published: all(b)})
			switch {
			case i < killAfter && err != nil:
				t.Fatalf("round %d: batch %d: %v", round, i, err)
			case i < killAfter:
				record(b)
			case err == nil:
				t.Fatalf("round %d: batch %d completed after the relay died", round, i)
			}
		}
	}
	for _, n := range drain(t, openHistory(t, pool, "kill", true), 4) {
		delivered[n]++
	}
	onceEach(t, delivered, 1, 25)
}

// TestCursorDeposedHolderFenced: a batch claimed under a lease another
// owner took over since records nothing (its retries, dead letters and the
// position's advance are one fenced transaction), and the deposed holder
// claims nothing more; the new holder claims every row.
func TestCursorDeposedHolderFenced(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	dsn, pool := historyDB(t)
	insertHistory(t, pool, "k", 1, 2, 3, 4)
	holder := func(name string) (*lease.Leases, *pgxpool.Pool) {
		p := ownerPool(t, dsn, name+"-"+pgtest.Suffix())
		return postgres.NewLeases(p, relaySchema, name), p
	}
	la, pa := holder("a")
	a, err := la.Acquire(ctx, "s", time.Minute)
	if err != nil || a == nil {
		t.Fatalf("acquire: %v %v", a, err)
	}
	st := openHistory(t, pa, "s", true)
	st.Fence.Set(a)
	b, err := st.Claim(ctx, 3)
	if err != nil || b == nil {
		t.Fatalf("claim: %v %v", b, err)
	}
	pgtest.Exec(t, pool, `UPDATE outbox_relay.leases SET expires_at = now() - interval '1 second'`)
	lb, pb := holder("b")
	nb, err := lb.Acquire(ctx, "s", time.Minute)
	if err != nil || nb == nil {
		t.Fatalf("b's acquire: %v %v", nb, err)
	}
	err = b.Complete(ctx, source.Outcome{Published: []int{0},
		Retry: []source.Retry{{Index: 1, Attempts: 1, At: time.Now(), Err: "down"}},
		Dead:  []source.Dead{{Index: 2, Attempts: 1, Reason: "refused", PayloadIsJSON: true}}})
	if !errors.Is(err, lease.ErrLeaseLost) {
		t.Fatalf("the deposed holder's Complete = %v, want ErrLeaseLost", err)
	}
	var retrying, dead int
	_ = pool.QueryRow(ctx, `SELECT (SELECT count(*) FROM outbox_relay.retry_state), (SELECT count(*) FROM outbox_relay.failed_events)`).Scan(&retrying, &dead)
	if retrying != 0 || dead != 0 {
		t.Fatalf("the deposed holder's completion recorded %d retries and %d dead letters", retrying, dead)
	}
	if b2, err := st.Claim(ctx, 3); b2 != nil || !errors.Is(err, lease.ErrLeaseLost) {
		if b2 != nil {
			_ = b2.Release(ctx)
		}
		t.Fatalf("the deposed holder's claim = %v, %v; want ErrLeaseLost", b2, err)
	}
	st2 := openHistory(t, pb, "s", true)
	st2.Fence.Set(nb)
	if got := drain(t, st2, 10); !slices.Equal(got, []int{1, 2, 3, 4}) {
		t.Fatalf("the new holder claimed %v, want every row", got)
	}
}

// TestCursorWritesNothingToTheTable: a run with deliveries, retries, a key
// held behind a retry, dead letters and a replay leaves every row of the
// table as it was written (its version, xmin and ctid).
func TestCursorWritesNothingToTheTable(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	_, pool := historyDB(t)
	insertHistory(t, pool, "a", 1, 2, 3)
	insertHistory(t, pool, "b", 4, 5)
	versions := func() []string {
		return column(t, pool, "SELECT id || ':' || xmin || ':' || ctid::text FROM public.history ORDER BY id")
	}
	before := versions()
	st := openHistory(t, pool, "untouched", true)
	b, err := st.Claim(ctx, 4)
	if err != nil || b == nil {
		t.Fatalf("claim: %v %v", b, err)
	}
	complete(t, b, source.Outcome{Published: []int{3},
		Retry: []source.Retry{{Index: 0, Attempts: 1, At: time.Now().Add(300 * time.Millisecond), Err: "down"}},
		Dead:  []source.Dead{{Index: 2, Attempts: 1, Reason: "refused", PayloadIsJSON: true}}})
	// a's first row backs off: its second (in no list above) and a later
	// one wait behind it; b flows.
	insertHistory(t, pool, "a", 6)
	if got := drain(t, st, 10); !slices.Equal(got, []int{5}) {
		t.Fatalf("claimed %v while key a backs off, want [5]", got)
	}
	time.Sleep(400 * time.Millisecond)
	if got := drain(t, st, 10); !slices.Equal(got, []int{1, 2, 6}) {
		t.Fatalf("claimed %v once key a is due, want [1 2 6]", got)
	}
	dl, err := postgres.ListFailed(ctx, pool, relaySchema, source.DLQFilter{Source: "untouched"})
	if err != nil || len(dl) != 1 {
		t.Fatalf("dead letters %v, %v", dl, err)
	}
	if n, err := st.Replay(ctx, dl, "test"); err != nil || n != 1 {
		t.Fatalf("replay: %d, %v", n, err)
	}
	if got := drain(t, st, 10); !slices.Equal(got, []int{3}) {
		t.Fatalf("claimed %v after the replay, want [3]", got)
	}
	if after := versions(); !slices.Equal(after[:len(before)], before) {
		t.Fatalf("the table's rows changed: %v, were %v", after, before)
	}
}

// TestCursorAdvice: ClaimAdvice names the index a cursor's claims want.
func TestCursorAdvice(t *testing.T) {
	t.Parallel()
	_, pool := historyDB(t)
	if a := openHistory(t, pool, "adv", true).ClaimAdvice(); a != "" {
		t.Errorf("advice with the index (tx, id): %q", a)
	}
	pgtest.Exec(t, pool, "DROP INDEX history_tx", "CREATE INDEX ON public.history (tx)")
	if a := openHistory(t, pool, "adv", true).ClaimAdvice(); a == "" {
		t.Error("no advice with an index on tx alone")
	} else {
		t.Log(a)
	}
	pgtest.Exec(t, pool, "DROP INDEX history_tx_idx")
	if a := openHistory(t, pool, "adv", true).ClaimAdvice(); a == "" {
		t.Error("no advice without an index on tx")
	} else {
		t.Log(a)
	}
}

func publish(t *testing.T, b source.Batch) {
	t.Helper()
	complete(t, b, source.Outcome{Published: all(b)})
}

func complete(t *testing.T, b source.Batch, o source.Outcome) {
	t.Helper()
	if err := b.Complete(context.Background(), o); err != nil {
		t.Fatal(err)
	}
}

// TestCursorRetryKeepsCursorOrder: the rows of a key waiting in
// retry_state come back in the order the cursor handed them on, not in
// transaction id order: a row of a transaction that began first and
// committed last comes after the rows of its key committed before it, also
// when it waits behind one of them backing off.
func TestCursorRetryKeepsCursorOrder(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	_, pool := historyDB(t)
	st := openHistory(t, pool, "order", true)
	late, err := pool.Begin(ctx)
	if err != nil {
		t.Fatal(err)
	}
	defer func() { _ = late.Rollback(ctx) }()
	insertHistory(t, late, "K", 1) // the smaller transaction id
	insertHistory(t, pool, "K", 2)
	b, err := st.Claim(ctx, 10)
	if err != nil || b == nil || len(b.Rows()) != 1 || payloadN(t, b.Rows()[0]) != 2 {
		t.Fatalf("claim while the late transaction is open: %v, %v; want the row of n 2", b, err)
	}
	const backoff = 500 * time.Millisecond
	complete(t, b, source.Outcome{Retry: []source.Retry{{Index: 0, Attempts: 1, At: time.Now().Add(backoff), Err: "down"}}})
	if err := late.Commit(ctx); err != nil {
		t.Fatal(err)
	}
	if got := drain(t, st, 10); len(got) != 0 {
		t.Fatalf("claimed %v while key K backs off", got)
	}
	time.Sleep(backoff + 100*time.Millisecond)
	if got := drain(t, st, 10); !slices.Equal(got, []int{2, 1}) {
		t.Fatalf("claimed %v once key K is due, want [2 1]: the order the cursor handed them on in", got)
	}
}

// TestCursorRetentionKeepsTheTable: a retention run over a source read by
// capture cursor deletes none of the table's rows, delivered or dead (the
// table is the application's history), and still prunes the relay's own
// tables.
func TestCursorRetentionKeepsTheTable(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	_, pool := historyDB(t)
	insertHistory(t, pool, "k", 1, 2, 3)
	st := openHistory(t, pool, "kept", true)
	b, err := st.Claim(ctx, 10)
	if err != nil || b == nil {
		t.Fatalf("claim: %v %v", b, err)
	}
	complete(t, b, source.Outcome{Published: []int{0, 1}, Dead: []source.Dead{{Index: 2, Attempts: 1, Reason: "refused", PayloadIsJSON: true}}})
	cols, err := postgres.Columns(ctx, pool, historyName)
	if err != nil {
		t.Fatal(err)
	}
	merged, explicit, _ := layout.MergeUntouched("", layout.Spec{ID: "id", Payload: "payload", Topic: "history", XIDColumn: "tx"}, "")
	l, err := layout.Resolve(merged, explicit, historyName.String(), cols)
	if err != nil {
		t.Fatal(err)
	}
	res, err := postgres.Purge(ctx, pool, postgres.PurgeParams{Source: "kept", Table: historyName, RelaySchema: relaySchema, Layout: l,
		PurgeOptions: source.PurgeOptions{IncludeDead: true}})
	if err != nil || !res.KeptByLayout || res.Published != 0 || res.Dead != 0 {
		t.Fatalf("retention = %+v, %v; want the table kept", res, err)
	}
	var n int
	if err := pool.QueryRow(ctx, "SELECT count(*) FROM public.history").Scan(&n); err != nil || n != 3 {
		t.Fatalf("%d rows left (%v), want the 3 rows", n, err)
	}
}

// TestCursorBacklog: the backlog counts every row ahead of the recorded
// position, and only those: rows of a transaction the position saw in
// progress, of one begun after it but in progress in the bound of the
// range it took in part, and the rows after the last one taken in that
// range; none behind.
func TestCursorBacklog(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	_, pool := historyDB(t)
	st := openHistory(t, pool, "backlog", true)
	pending := func() int64 {
		t.Helper()
		g, err := st.RecordStats(ctx, source.Stats{})
		if err != nil {
			t.Fatal(err)
		}
		return g.Backlog.Pending
	}
	begin := func(n int) pgx.Tx {
		tx, err := pool.Begin(ctx)
		if err != nil {
			t.Fatal(err)
		}
		t.Cleanup(func() { _ = tx.Rollback(ctx) })
		insertHistory(t, tx, "L", n)
		return tx
	}
	insertHistory(t, pool, "k", 1)
	late1 := begin(-1) // in progress in the position's snapshot
	if got := drain(t, st, 10); !slices.Equal(got, []int{1}) {
		t.Fatalf("claimed %v, want [1]", got)
	}
	late2 := begin(-2) // begun after it, in progress in the next bound
	insertHistory(t, pool, "k", 2, 3)
	b, err := st.Claim(ctx, 1)
	if err != nil || b == nil {
		t.Fatalf("claim: %v, %v", b, err)
	}
	publish(t, b) // the range of that bound taken in part: 2 of 2 and 3
	for _, tx := range []pgx.Tx{late1, late2} {
		if err := tx.Commit(ctx); err != nil {
			t.Fatal(err)
		}
	}
	if n := pending(); n != 3 {
		t.Errorf("backlog %d, want 3: the rows of both late transactions and 3", n)
	}
	if got := drain(t, st, 10); !slices.Equal(got, []int{3, -1, -2}) {
		t.Fatalf("claimed %v, want [3 -1 -2]", got)
	}
	if n := pending(); n != 0 {
		t.Errorf("backlog %d after every row was handed on, want 0", n)
	}
}
