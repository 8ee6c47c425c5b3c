package e2e

import (
	"context"
	"encoding/json"
	"fmt"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/twmb/franz-go/pkg/kfake"

	"github.com/outbox-relay/outbox-relay/internal/config"
	"github.com/outbox-relay/outbox-relay/internal/layout"
	"github.com/outbox-relay/outbox-relay/internal/pgtest"
)

// historyDDL is an application's history table: append-only, each row
// stamped with its inserting transaction's id, indexed as capture cursor
// reads it.
const historyDDL = `CREATE SCHEMA audit;
CREATE TABLE audit.history (
  id BIGSERIAL PRIMARY KEY,
  tx XID8 NOT NULL DEFAULT pg_current_xact_id(),
  k TEXT NOT NULL,
  seq INT NOT NULL,
  payload JSONB NOT NULL);
CREATE INDEX history_tx ON audit.history (tx, id)`

// cursorSource reads audit.history by capture cursor into topic history.
func cursorSource() config.Source {
	return config.Source{Name: "history", Table: "audit.history", Capture: config.CaptureCursor, Topic: "history",
		BatchSize: 50, Pipeline: 2,
		Layout: layout.Spec{ID: "id", Payload: "payload", Key: "{k}", XIDColumn: "tx"}}
}

// TestCaptureCursor: a history table written by several concurrent
// transactions, one of which began before all the others and inserted first
// but stays open while they commit, relayed by capture cursor to Kafka. The
// others' events flow while it is open; once it commits its events follow.
// Every event arrives once, each key's in the order it was written, and the
// relay never updated nor deleted a row of the table.
func TestCaptureCursor(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	dsn, pool := pgtest.NewDB(t)
	pgtest.Exec(t, pool, historyDDL)
	c := kafkaCluster(t, kfake.SeedTopics(4, "history"))
	col := collect(t, c.ListenAddrs(), "history")
	stop := runRelay(t, baseConfig(dsn, c.ListenAddrs(), cursorSource()))
	// The wake-up trigger is installed at start; the open transaction
	// below would hold its creation up.
	waitFor(t, 10*time.Second, "the wake-up trigger", func() (bool, string) {
		var n int
		_ = pool.QueryRow(ctx, "SELECT count(*) FROM pg_trigger WHERE tgname = 'outbox_relay_notify'").Scan(&n)
		return n == 1, "not yet"
	})

	// insert writes, in one transaction of tx, one row each of keys, each
	// key's next in sequence.
	type keyed struct {
		mu  sync.Mutex
		seq map[string]int
	}
	seqs := &keyed{seq: map[string]int{}}
	insert := func(tx pgx.Tx, keys ...string) error {
		for _, k := range keys {
			seqs.mu.Lock()
			n := seqs.seq[k]
			seqs.seq[k]++
			seqs.mu.Unlock()
			if _, err := tx.Exec(ctx, `INSERT INTO audit.history (k, seq, payload) VALUES ($1, $2, jsonb_build_object('k', $1::text, 'seq', $2::int))`, k, n); err != nil {
				return err
			}
		}
		return nil
	}
	late, err := pool.Begin(ctx)
	if err != nil {
		t.Fatal(err)
	}
	defer func() { _ = late.Rollback(ctx) }()
	if err := insert(late, "late-a", "late-b", "late-a", "late-a", "late-b"); err != nil {
		t.Fatal(err)
	}

	// Writers commit transactions of several rows over keys of their own
	// (each key's rows written one transaction after the other).
	const writers, txs = 4, 40
	var wg sync.WaitGroup
	errs := make(chan error, writers)
	for w := range writers {
		wg.Go(func() {
			for i := range txs {
				err := pgx.BeginFunc(ctx, pool, func(tx pgx.Tx) error {
					return insert(tx, fmt.Sprintf("w%d-%d", w, i%3), fmt.Sprintf("w%d-%d", w, (i+1)%3), fmt.Sprintf("w%d-%d", w, i%3))
				})
				if err != nil {
					errs <- err
					return
				}
			}
		})
	}
	wg.Wait()
	close(errs)
	for err := range errs {
		t.Fatal(err)
	}
	others := writers * txs * 3
	// The open transaction holds nothing up but its own rows.
	recs := col.waitDistinct(t, others, 60*time.Second)
	for _, r := range recs {
		if strings.HasPrefix(string(r.Key), "late-") {
			t.Fatalf("a row of the open transaction was published: %s", r.Value)
		}
	}
	if err := late.Commit(ctx); err != nil {
		t.Fatal(err)
	}
	total := others + 5
	recs = col.waitDistinct(t, total, 60*time.Second)
	time.Sleep(300 * time.Millisecond) // anything published twice would show by now
	recs = col.records()
	if len(recs) != total {
		t.Errorf("%d records for %d events: every event once, want %d", len(recs), total, total)
	}
	next := map[string]int{}
	for _, r := range recs {
		var p struct {
			K   string
			Seq int
		}
		if err := json.Unmarshal(r.Value, &p); err != nil {
			t.Fatalf("payload %s: %v", r.Value, err)
		}
		if string(r.Key) != p.K {
			t.Errorf("record key %q for an event of key %s", r.Key, p.K)
		}
		if p.Seq != next[p.K] {
			t.Errorf("key %s: event %d arrived after event %d", p.K, p.Seq, next[p.K]-1)
		}
		next[p.K] = p.Seq + 1
	}

	// The relay's sessions end with it, and their statistics with them:
	// the table's counters then hold every insert and nothing else.
	stop()
	waitFor(t, 20*time.Second, "the table's statistics", func() (bool, string) {
		var ins, upd, del int64
		_ = pool.QueryRow(ctx, `SELECT pg_stat_clear_snapshot()::text, n_tup_ins, n_tup_upd + n_tup_hot_upd, n_tup_del
FROM pg_stat_user_tables WHERE relid = 'audit.history'::regclass`).Scan(nil, &ins, &upd, &del)
		if upd != 0 || del != 0 {
			t.Fatalf("the table's rows were written: %d updates, %d deletes", upd, del)
		}
		return ins == int64(total), fmt.Sprintf("%d inserts counted", ins)
	})
}

// TestCheckCaptureCursor: check says a cursor source's table needs SELECT
// alone (the relay writes nothing to it) and names the index its claims
// want when the table lacks it.
func TestCheckCaptureCursor(t *testing.T) {
	t.Parallel()
	dsn, pool := pgtest.NewDB(t)
	pgtest.Exec(t, pool, historyDDL, "DROP INDEX audit.history_tx")
	c := kafkaCluster(t, kfake.SeedTopics(1, "history"))
	cfg := writeYAML(t, fmt.Sprintf(`databases:
  main: {dsn: %q}
sinks:
  kafka: {type: kafka, brokers: [%q]}
sources:
  - name: history
    table: audit.history
    capture: cursor
    topic: history
    layout: {id: id, payload: payload, key: "{k}", xid_column: tx}
`, dsn, c.ListenAddrs()[0]))
	if out, err := runCLI(t, "--config", cfg, "migrate", "up"); err != nil {
		t.Fatalf("migrate: %v\n%s", err, out)
	}
	out, err := runCLI(t, "--config", cfg, "check", "--skip-sinks")
	if err != nil {
		t.Fatalf("check: %v\n%s", err, out)
	}
	for _, want := range []string{
		`source history: "audit"."history" (capture cursor by tx: the relay writes nothing to it) needs SELECT: ok`,
		`source history: claims: WARNING no index leads with the xid column "tx"`,
		`CREATE INDEX ON "audit"."history" ("tx", "id")`,
	} {
		if !strings.Contains(out, want) {
			t.Errorf("check output lacks %q:\n%s", want, out)
		}
	}
	pgtest.Exec(t, pool, "CREATE INDEX ON audit.history (tx, id)")
	if out, err := runCLI(t, "--config", cfg, "check", "--skip-sinks"); err != nil || strings.Contains(out, "claims: WARNING") {
		t.Fatalf("check with the index: %v; want no claims warning:\n%s", err, out)
	}
}
