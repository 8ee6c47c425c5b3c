package mysql_test

import (
	"context"
	"database/sql"
	"testing"
	"time"

	"github.com/outbox-relay/outbox-relay/internal/lease"
	"github.com/outbox-relay/outbox-relay/internal/lease/leasetest"
	"github.com/outbox-relay/outbox-relay/internal/mytest"
	"github.com/outbox-relay/outbox-relay/internal/source"
	"github.com/outbox-relay/outbox-relay/internal/source/mysql"
)

// TestLeaseConformance runs the lease conformance suite on MySQL/MariaDB.
func TestLeaseConformance(t *testing.T) {
	t.Parallel()
	leasetest.Run(t, myLeases{})
}

// myLeases gives each case an application database with a kafka_outbox
// table and a migrated relay database of its own.
type myLeases struct{}

func (myLeases) DeposedClaimFails() bool { return true }

func (myLeases) NewEnv(t *testing.T, rows int) leasetest.Env {
	t.Helper()
	e := newEnv(t)
	e.exec(t, kafkaOutbox)
	for range rows {
		e.exec(t, "INSERT INTO kafka_outbox (topic, payload_json, `key`) VALUES ('t', '{}', 'k')")
	}
	return &myLeaseEnv{e: e}
}

type myLeaseEnv struct{ e *env }

// Owner names are server-wide (named locks): unique per test.
func (m *myLeaseEnv) Owner(t *testing.T, name string) leasetest.Owner {
	t.Helper()
	name += "-" + mytest.Suffix()
	db := m.e.open(t, mysql.ConnOptions{Owner: name})
	l := mysql.NewLeases(db, m.e.relayDB, name)
	t.Cleanup(func() { _ = l.Close() })
	return &myOwner{env: m.e, name: name, db: db, leases: l}
}

func (m *myLeaseEnv) Table() string { return "kafka_outbox" }

func (m *myLeaseEnv) ExpireAll(t *testing.T) {
	m.e.exec(t, "UPDATE "+m.e.relayDB+".leases SET expires_at = UTC_TIMESTAMP(6) - INTERVAL 1 SECOND")
}

func (m *myLeaseEnv) Pending(t *testing.T) int {
	return queryInt(t, m.e.db, "SELECT COUNT(*) FROM kafka_outbox WHERE push_completed_at IS NULL")
}

func (m *myLeaseEnv) DeadLetters(t *testing.T) int {
	return queryInt(t, m.e.db, "SELECT COUNT(*) FROM "+m.e.relayDB+".failed_events")
}

func (m *myLeaseEnv) Free(t *testing.T) int {
	return queryInt(t, m.e.db, "SELECT COUNT(*) FROM (SELECT id FROM kafka_outbox FOR UPDATE SKIP LOCKED) x")
}

type myOwner struct {
	env    *env
	name   string
	db     *sql.DB
	leases *mysql.Leases
}

func (o *myOwner) Name() string          { return o.name }
func (o *myOwner) Leases() *lease.Leases { return o.leases.Leases }

func (o *myOwner) Die(t *testing.T) {
	if err := o.leases.Close(); err != nil {
		t.Fatal(err)
	}
	_ = o.db.Close()
}

func (o *myOwner) Store(t *testing.T, shard string) source.Store {
	st, _ := o.env.store(t, o.db, shard, "kafka_outbox", "", kafkaLayout, true)
	return st
}

// TestWaitForOwner: WaitForOwner returns once the previous owner has no
// transaction open.
func TestWaitForOwner(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	e := newEnv(t)
	sfx := mytest.Suffix()
	ownerA, ownerC := "a-"+sfx, "c-"+sfx
	aDB := e.open(t, mysql.ConnOptions{Owner: ownerA})
	c := mysql.NewLeases(e.db, e.relayDB, ownerC)
	defer c.Close()
	tx, err := aDB.BeginTx(ctx, nil)
	if err != nil {
		t.Fatal(err)
	}
	if _, err := tx.ExecContext(ctx, "SELECT * FROM "+e.relayDB+".leases FOR UPDATE"); err != nil {
		t.Fatal(err)
	}
	wctx, cancel := context.WithTimeout(ctx, 300*time.Millisecond)
	if err := c.WaitForOwner(wctx, ownerA); err == nil {
		t.Fatal("WaitForOwner returned while a's transaction was open")
	}
	cancel()
	_ = tx.Rollback()
	wctx, cancel = context.WithTimeout(ctx, 5*time.Second)
	defer cancel()
	if err := c.WaitForOwner(wctx, ownerA); err != nil {
		t.Fatal(err)
	}
}

// TestEndOwnerSeesTransactionsWhileOthersPoll: EndOwner ends a transaction
// the previous owner began while other sessions keep reading the server's
// list of transactions. information_schema.INNODB_TRX is a cache refreshed
// only once nobody has read it for a tenth of a second: with a session
// polling it (another replica taking a shard over), it kept showing the
// server as it was before the transaction began, and EndOwner returned
// with the previous owner's claim still open.
func TestEndOwnerSeesTransactionsWhileOthersPoll(t *testing.T) {
	t.Parallel()
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	e := newEnv(t)
	e.exec(t, kafkaOutbox, "INSERT INTO kafka_outbox (topic, payload_json, `key`) VALUES ('t', '{}', 'k')")
	sfx := mytest.Suffix()
	ownerA, ownerC := "a-"+sfx, "c-"+sfx
	aDB := e.open(t, mysql.ConnOptions{Owner: ownerA})
	c := mysql.NewLeases(e.db, e.relayDB, ownerC)
	defer c.Close()

	poller := e.open(t, mysql.ConnOptions{})
	polled := make(chan struct{})
	done := make(chan struct{})
	go func() {
		defer close(done)
		for i := 0; ctx.Err() == nil; i++ {
			var n int
			_ = poller.QueryRowContext(ctx, "SELECT COUNT(*) FROM information_schema.INNODB_TRX").Scan(&n)
			if i == 10 {
				close(polled)
			}
			select {
			case <-ctx.Done():
			case <-time.After(20 * time.Millisecond):
			}
		}
	}()
	defer func() { cancel(); <-done }()
	<-polled // the list has been read continuously for a while

	tx, err := aDB.BeginTx(ctx, nil)
	if err != nil {
		t.Fatal(err)
	}
	defer func() { _ = tx.Rollback() }()
	if _, err := tx.ExecContext(ctx, "SELECT id FROM kafka_outbox FOR UPDATE"); err != nil {
		t.Fatal(err)
	}
	ectx, ecancel := context.WithTimeout(ctx, 10*time.Second)
	defer ecancel()
	if err := c.EndOwner(ectx, ownerA, "kafka_outbox", func(err error) { t.Log(err) }); err != nil {
		t.Fatal(err)
	}
	if free := queryInt(t, e.db, "SELECT COUNT(*) FROM (SELECT id FROM kafka_outbox FOR UPDATE SKIP LOCKED) x"); free != 1 {
		t.Fatalf("after EndOwner the previous owner's claim still holds its row (%d of 1 free)", free)
	}
}
