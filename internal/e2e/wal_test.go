package e2e

import (
	"context"
	"encoding/json"
	"fmt"
	"strings"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/twmb/franz-go/pkg/kfake"

	"github.com/outbox-relay/outbox-relay/internal/config"
	"github.com/outbox-relay/outbox-relay/internal/fixtures"
	"github.com/outbox-relay/outbox-relay/internal/pgtest"
	"github.com/outbox-relay/outbox-relay/internal/source/postgres"
)

// TestWALSeed001: seed 001's outbox, verbatim, relayed with capture wal.
// A few events wait in the table before the relay starts (read in the
// slot's snapshot); then 200 transactions, each of one key, write three
// single-row INSERTs and one three-row INSERT. Every key's events arrive in
// the order they were written (the rows of one INSERT share created_at and
// their statement, which only the write-ahead log orders), every row is
// marked published, and the slot confirms up to the end of the WAL.
func TestWALSeed001(t *testing.T) {
	t.Parallel()
	const txs, keys = 200, 16
	ctx := context.Background()
	dsn, pool := pgtest.NewDB(t)
	pgtest.Exec(t, pool, fixtures.Seed001)
	slot := postgres.WALName(config.DefaultRelaySchema, "orders")
	t.Cleanup(func() {
		// After the relay has stopped (cleanups run last first): a slot
		// pins WAL, and its database cannot be dropped while it exists.
		_, _ = pool.Exec(context.Background(), `SELECT pg_terminate_backend(active_pid, 5000) FROM pg_replication_slots WHERE slot_name = $1 AND active_pid IS NOT NULL`, slot)
		if _, err := pool.Exec(context.Background(), `SELECT pg_drop_replication_slot(slot_name) FROM pg_replication_slots WHERE slot_name = $1`, slot); err != nil {
			t.Errorf("drop slot %s: %v", slot, err)
		}
	})
	seq := map[string]int{}
	row := func(key string) string {
		seq[key]++
		return fmt.Sprintf(`('order', '00000000-0000-0000-0000-%012d', 'order.created', 'orders', '%s', '{"k": "%s", "s": %d}')`,
			len(key), key, key, seq[key])
	}
	const insert = `INSERT INTO outbox (aggregate_type, aggregate_id, event_type, topic, partition_key, payload) VALUES `
	for k := range keys {
		key := fmt.Sprintf("key-%02d", k)
		pgtest.Exec(t, pool, insert+row(key))
	}

	c := kafkaCluster(t, kfake.SeedTopics(4, "orders"))
	col := collect(t, c.ListenAddrs(), "orders")
	runRelay(t, baseConfig(dsn, c.ListenAddrs(), config.Source{Name: "orders", Table: "public.outbox", Preset: "status",
		Capture: config.CaptureWAL, BatchSize: 100, Pipeline: 2}))
	waitFor(t, 30*time.Second, "the relay streams its slot", func() (bool, string) {
		var active bool
		err := pool.QueryRow(ctx, `SELECT active FROM pg_replication_slots WHERE slot_name = $1`, slot).Scan(&active)
		return err == nil && active, fmt.Sprint(err)
	})
	for i := range txs {
		key := fmt.Sprintf("key-%02d", i%keys)
		err := pgx.BeginFunc(ctx, pool, func(tx pgx.Tx) error {
			for range 3 {
				if _, err := tx.Exec(ctx, insert+row(key)); err != nil {
					return err
				}
			}
			_, err := tx.Exec(ctx, insert+strings.Join([]string{row(key), row(key), row(key)}, ", "))
			return err
		})
		if err != nil {
			t.Fatal(err)
		}
	}
	var end string
	if err := pool.QueryRow(ctx, `SELECT pg_current_wal_lsn()::text`).Scan(&end); err != nil {
		t.Fatal(err)
	}
	total := keys + txs*6
	recs := col.waitDistinct(t, total, 90*time.Second)

	last := map[string]int{}
	seen := map[string]bool{}
	for _, r := range recs {
		var p struct {
			K string
			S int
		}
		if err := json.Unmarshal(r.Value, &p); err != nil {
			t.Fatalf("payload %s: %v", r.Value, err)
		}
		id := fmt.Sprintf("%s/%d", p.K, p.S)
		if seen[id] {
			continue
		}
		seen[id] = true
		if p.S != last[p.K]+1 {
			t.Errorf("key %s: event %d arrived after event %d", p.K, p.S, last[p.K])
		}
		last[p.K] = p.S
	}
	waitFor(t, 30*time.Second, "every row marked published", func() (bool, string) {
		var n int
		err := pool.QueryRow(ctx, `SELECT count(*) FROM outbox WHERE status <> 'published' OR published_at IS NULL`).Scan(&n)
		return err == nil && n == 0, fmt.Sprintf("%d not published (%v)", n, err)
	})
	waitFor(t, 30*time.Second, "the slot confirms the end of the inserts", func() (bool, string) {
		var ok bool
		var at string
		err := pool.QueryRow(ctx, `SELECT confirmed_flush_lsn >= $2::pg_lsn, confirmed_flush_lsn::text FROM pg_replication_slots WHERE slot_name = $1`,
			slot, end).Scan(&ok, &at)
		return err == nil && ok, fmt.Sprintf("at %s, want %s (%v)", at, end, err)
	})
}
