package postgres_test

import (
	"context"
	"fmt"
	"testing"
	"time"

	"github.com/jackc/pgx/v5/pgxpool"

	"github.com/outbox-relay/outbox-relay/internal/fixtures"
	"github.com/outbox-relay/outbox-relay/internal/layout"
	"github.com/outbox-relay/outbox-relay/internal/lease"
	"github.com/outbox-relay/outbox-relay/internal/lease/leasetest"
	"github.com/outbox-relay/outbox-relay/internal/pgtest"
	"github.com/outbox-relay/outbox-relay/internal/source"
	"github.com/outbox-relay/outbox-relay/internal/source/postgres"
)

// TestLeaseConformance runs the lease conformance suite on PostgreSQL.
func TestLeaseConformance(t *testing.T) {
	t.Parallel()
	leasetest.Run(t, pgLeases{})
}

// pgLeases gives each case a migrated database of its own with the seed
// 001 outbox table.
type pgLeases struct{}

func (pgLeases) DeposedClaimFails() bool { return false }

func (pgLeases) NewEnv(t *testing.T, rows int) leasetest.Env {
	t.Helper()
	dsn, pool := migrated(t)
	pgtest.Exec(t, pool, fixtures.Seed001)
	// One key, one statement per row: each row's created_at is later.
	key := "6f2a1c3e-0000-4000-8000-" + fmt.Sprintf("%012d", rows)
	for n := range rows {
		pgtest.Exec(t, pool, fmt.Sprintf(`INSERT INTO outbox (aggregate_type, aggregate_id, event_type, topic, payload)
VALUES ('Order', '%s', 'order.placed', 'orders', jsonb_build_object('n', %d))`, key, n))
	}
	return &pgLeaseEnv{dsn: dsn, pool: pool, table: postgres.Table{Schema: "public", Name: "outbox"}}
}

type pgLeaseEnv struct {
	dsn   string
	pool  *pgxpool.Pool
	table postgres.Table
}

// Owner names are unique on the server: sessions of every database show
// in pg_stat_activity.
func (e *pgLeaseEnv) Owner(t *testing.T, name string) leasetest.Owner {
	t.Helper()
	name += "-" + pgtest.Suffix()
	p := ownerPool(t, e.dsn, name)
	if err := p.Ping(context.Background()); err != nil { // alive from now on
		t.Fatal(err)
	}
	return &pgOwner{env: e, name: name, pool: p, leases: postgres.NewLeases(p, relaySchema, name)}
}

func (e *pgLeaseEnv) Table() string { return e.table.String() }

func (e *pgLeaseEnv) ExpireAll(t *testing.T) {
	pgtest.Exec(t, e.pool, `UPDATE outbox_relay.leases SET expires_at = now() - interval '1 second'`)
}

func (e *pgLeaseEnv) count(t *testing.T, q string) int {
	t.Helper()
	var n int
	if err := e.pool.QueryRow(context.Background(), q).Scan(&n); err != nil {
		t.Fatalf("%s: %v", q, err)
	}
	return n
}

func (e *pgLeaseEnv) Pending(t *testing.T) int {
	return e.count(t, "SELECT count(*) FROM outbox WHERE status = 'pending'")
}

func (e *pgLeaseEnv) DeadLetters(t *testing.T) int {
	return e.count(t, "SELECT count(*) FROM outbox_relay.failed_events")
}

func (e *pgLeaseEnv) Free(t *testing.T) int {
	return e.count(t, "SELECT count(*) FROM (SELECT 1 FROM outbox FOR UPDATE SKIP LOCKED) x")
}

type pgOwner struct {
	env    *pgLeaseEnv
	name   string
	pool   *pgxpool.Pool
	leases *lease.Leases
}

func (o *pgOwner) Name() string          { return o.name }
func (o *pgOwner) Leases() *lease.Leases { return o.leases }

// Die closes the owner's connections and returns once the server shows
// none of its sessions (a backend ends a moment after its client closes).
func (o *pgOwner) Die(t *testing.T) {
	t.Helper()
	o.pool.Close()
	app := postgres.ApplicationName(o.name)
	deadline := time.Now().Add(10 * time.Second)
	for {
		var n int
		if err := o.env.pool.QueryRow(context.Background(), "SELECT count(*) FROM pg_stat_activity WHERE application_name = $1", app).Scan(&n); err != nil {
			t.Fatal(err)
		}
		if n == 0 {
			return
		}
		if time.Now().After(deadline) {
			t.Fatalf("%s still has %d sessions 10 s after its connections closed", o.name, n)
		}
		time.Sleep(5 * time.Millisecond)
	}
}

func (o *pgOwner) Store(t *testing.T, shard string) source.Store {
	st, _ := newStore(t, o.pool, shard, o.env.table, "status", layout.Spec{}, true)
	return st
}
