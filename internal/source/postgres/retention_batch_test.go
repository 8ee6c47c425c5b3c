package postgres_test

import (
	"context"
	"errors"
	"sync"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgxpool"

	"github.com/outbox-relay/outbox-relay/internal/fixtures"
	"github.com/outbox-relay/outbox-relay/internal/layout"
	"github.com/outbox-relay/outbox-relay/internal/pgtest"
	"github.com/outbox-relay/outbox-relay/internal/source"
	"github.com/outbox-relay/outbox-relay/internal/source/postgres"
)

var journeys = postgres.Table{Schema: "journey_matcher", Name: "outbox"}

// oldPublished makes a journey_matcher outbox with n rows delivered a month
// ago, and returns its layout.
func oldPublished(t *testing.T, n int) (*pgxpool.Pool, *layout.Layout) {
	t.Helper()
	_, pool := migrated(t)
	pgtest.Exec(t, pool, fixtures.Seed000)
	_, err := pool.Exec(context.Background(), `INSERT INTO journey_matcher.outbox
  (aggregate_id, aggregate_type, event_type, payload, correlation_id, created_at, published, published_at)
SELECT gen_random_uuid(), 'journey', 'journey.created', jsonb_build_object('n', i), gen_random_uuid(),
  now() - interval '31 days', true, now() - interval '30 days'
FROM generate_series(1, $1) i`, n)
	if err != nil {
		t.Fatal(err)
	}
	_, l := newStore(t, pool, "jm", journeys, "published-flag", layout.Spec{}, true)
	return pool, l
}

// TestPurgeCommitsEachBatch watches the table from another connection while
// Purge runs: the rows go in steps of the batch size, each committed on its
// own, so that the table is seen part-purged several times. One DELETE of
// every row would take it from all to none at once.
func TestPurgeCommitsEachBatch(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	const rows, batch = 60, 10
	pool, l := oldPublished(t, rows)

	var (
		mu   sync.Mutex
		seen = map[int]bool{}
	)
	done := make(chan struct{})
	var wg sync.WaitGroup
	wg.Go(func() {
		for {
			var n int
			if err := pool.QueryRow(ctx, "SELECT count(*) FROM journey_matcher.outbox").Scan(&n); err == nil {
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
	res, err := postgres.Purge(ctx, pool, postgres.PurgeParams{Source: "jm", Table: journeys, RelaySchema: relaySchema, Layout: l, PurgeOptions: source.PurgeOptions{OlderThan: week, BatchSize: batch, Pause: 100 * time.Millisecond}})
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

// TestPurgeRelayTables: dead letters replayed before the cutoff go with
// their audit rows; those replayed since, and open ones, stay. Retry state
// of events no longer in the table goes; that of present events, and of
// other sources, stays.
func TestPurgeRelayTables(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	dsn, pool := migrated(t)
	rt := retentionTables[2] // status
	rt.ddl(t, dsn, pool)
	st, l := newStore(t, pool, "src", rt.table, rt.preset, rt.over, false)
	ids := rt.fill(t, pool, 3)
	settle(t, st, nil, ids, nil)
	evs, err := postgres.ListFailed(ctx, pool, relaySchema, postgres.DLQFilter{EventIDs: ids[:2]})
	if err != nil || len(evs) != 2 {
		t.Fatalf("list dead letters: %v %v", evs, err)
	}
	if n, err := st.Replay(ctx, evs, "test"); err != nil || n != 2 {
		t.Fatalf("replay: %d %v", n, err)
	}
	pgtest.Exec(t, pool, "UPDATE outbox_relay.failed_events SET replayed_at = now() - interval '30 days' WHERE original_event_id = '"+ids[0]+"'")
	pgtest.Exec(t, pool,
		"INSERT INTO outbox_relay.retry_state (source, event_id, attempts, next_attempt_at) VALUES ('src', gen_random_uuid()::text, 1, now())",
		"INSERT INTO outbox_relay.retry_state (source, event_id, attempts, next_attempt_at) VALUES ('other', gen_random_uuid()::text, 1, now())",
		"INSERT INTO outbox_relay.retry_state (source, event_id, attempts, next_attempt_at) VALUES ('src', '"+ids[2]+"', 1, now())")

	p := purgeParams(l, rt)
	p.DryRun = true
	for _, dry := range []bool{true, false} {
		p.DryRun = dry
		res, err := postgres.Purge(ctx, pool, p)
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
		if n := count(t, pool, "SELECT count(*) FROM outbox_relay.failed_events"); n != wantFailed {
			t.Errorf("dry run %v: %d dead letters left, want %d", dry, n, wantFailed)
		}
		if n := count(t, pool, "SELECT count(*) FROM outbox_relay.failed_event_audit"); n != wantAudit {
			t.Errorf("dry run %v: %d audit rows left, want %d", dry, n, wantAudit)
		}
		if n := count(t, pool, "SELECT count(*) FROM outbox_relay.retry_state"); n != wantRetry {
			t.Errorf("dry run %v: %d retry states left, want %d", dry, n, wantRetry)
		}
	}
	if n := count(t, pool, "SELECT count(*) FROM outbox_relay.failed_events WHERE original_event_id = $1", ids[0]); n != 0 {
		t.Error("the dead letter replayed a month ago is still there")
	}
	if n := count(t, pool, "SELECT count(*) FROM outbox_relay.retry_state WHERE source = 'other'"); n != 1 {
		t.Error("another source's retry state was deleted")
	}
	if n := count(t, pool, "SELECT count(*) FROM outbox_relay.retry_state WHERE event_id = $1", ids[2]); n != 1 {
		t.Error("the retry state of an event still in the table was deleted")
	}
}

// TestPurgeNoAge: a layout with no column that dates its rows is refused.
func TestPurgeNoAge(t *testing.T) {
	t.Parallel()
	_, pool := migrated(t)
	pgtest.Exec(t, pool, "CREATE TABLE public.ev (id bigserial PRIMARY KEY, topic text NOT NULL, payload jsonb NOT NULL, done boolean NOT NULL DEFAULT false)")
	tbl := postgres.Table{Schema: "public", Name: "ev"}
	_, l := newStore(t, pool, "ev", tbl, "", layout.Spec{ID: "id", Payload: "payload", Topic: "{topic}",
		State: layout.State{Mode: "flag", Flag: "done"}}, true)
	_, err := postgres.Purge(context.Background(), pool, postgres.PurgeParams{Source: "ev", Table: tbl, RelaySchema: relaySchema, Layout: l})
	if !errors.Is(err, postgres.ErrNoAge) {
		t.Errorf("purge without a date column: %v, want ErrNoAge", err)
	}
}

// TestOptimize vacuums a table whose rows were all purged: the dead tuples
// are gone, the empty pages are given back and the server records the
// vacuum.
func TestOptimize(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	pool, l := oldPublished(t, 0)
	// Autovacuum must not get there first.
	pgtest.Exec(t, pool, "ALTER TABLE journey_matcher.outbox SET (autovacuum_enabled = false)")
	_, err := pool.Exec(ctx, `INSERT INTO journey_matcher.outbox
  (aggregate_id, aggregate_type, event_type, payload, correlation_id, created_at, published, published_at)
SELECT gen_random_uuid(), 'journey', 'journey.created', jsonb_build_object('n', i), gen_random_uuid(),
  now() - interval '31 days', true, now() - interval '30 days'
FROM generate_series(1, 5000) i`)
	if err != nil {
		t.Fatal(err)
	}
	if _, err := postgres.Purge(ctx, pool, postgres.PurgeParams{Source: "jm", Table: journeys, RelaySchema: relaySchema, Layout: l, PurgeOptions: source.PurgeOptions{OlderThan: week, BatchSize: 2000}}); err != nil {
		t.Fatal(err)
	}
	res, err := postgres.Optimize(ctx, pool, journeys)
	if err != nil {
		t.Fatal(err)
	}
	t.Logf("%+v", res)
	if res.After.LastVacuum == nil {
		t.Error("no vacuum recorded")
	}
	if res.After.DeadTuples != 0 || res.After.LiveTuples != 0 {
		t.Errorf("after vacuum: %d live, %d dead tuples; want 0 and 0", res.After.LiveTuples, res.After.DeadTuples)
	}
	if res.Before.HeapBytes == 0 || res.After.HeapBytes >= res.Before.HeapBytes || res.After.TotalBytes >= res.Before.TotalBytes {
		t.Errorf("size before %d (heap %d), after %d (heap %d): the empty pages were not given back",
			res.Before.TotalBytes, res.Before.HeapBytes, res.After.TotalBytes, res.After.HeapBytes)
	}
}

// TestRetentionNeedsPrivileges: a role that may only read and update the
// table (the relay's least privilege) cannot purge it, and the server's
// refusal to vacuum, which it only warns about, is reported as an error.
func TestRetentionNeedsPrivileges(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	dsn, pool := migrated(t)
	pgtest.Exec(t, pool, fixtures.Seed000)
	_, l := newStore(t, pool, "jm", journeys, "published-flag", layout.Spec{}, true)
	role := "outbox_relay_ret_" + pgtest.Suffix()
	ident := pgx.Identifier{role}.Sanitize()
	pgtest.Exec(t, pool, "CREATE ROLE "+ident+" LOGIN")
	t.Cleanup(func() {
		_, _ = pool.Exec(context.Background(), "DROP OWNED BY "+ident+" CASCADE")
		_, _ = pool.Exec(context.Background(), "DROP ROLE IF EXISTS "+ident)
	})
	pgtest.Exec(t, pool,
		"GRANT USAGE ON SCHEMA journey_matcher, outbox_relay TO "+ident,
		"GRANT SELECT, UPDATE ON journey_matcher.outbox TO "+ident,
		"GRANT SELECT, UPDATE, DELETE ON ALL TABLES IN SCHEMA outbox_relay TO "+ident)
	rpool, err := pgxpool.New(ctx, pgtest.WithUser(t, dsn, role))
	if err != nil {
		t.Fatal(err)
	}
	defer rpool.Close()
	_, err = postgres.Purge(ctx, rpool, postgres.PurgeParams{Source: "jm", Table: journeys, RelaySchema: relaySchema, Layout: l, PurgeOptions: source.PurgeOptions{OlderThan: week}})
	if !errors.Is(err, source.ErrNoPrivilege) {
		t.Errorf("purge without DELETE: %v, want ErrNoPrivilege", err)
	}
	if _, err := postgres.Optimize(ctx, rpool, journeys); !errors.Is(err, postgres.ErrVacuumSkipped) {
		t.Errorf("optimize by a role that does not own the table: %v, want ErrVacuumSkipped", err)
	}
}
