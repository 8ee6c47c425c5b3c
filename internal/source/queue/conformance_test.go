package queue_test

import (
	"context"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgxpool"

	"github.com/outbox-relay/outbox-relay/internal/layout"
	"github.com/outbox-relay/outbox-relay/internal/pgtest"
	"github.com/outbox-relay/outbox-relay/internal/source"
	"github.com/outbox-relay/outbox-relay/internal/source/postgres"
	"github.com/outbox-relay/outbox-relay/internal/source/queue"
	"github.com/outbox-relay/outbox-relay/internal/source/sourcetest"
)

const relaySchema = "outbox_relay"

// TestConformance runs the store conformance suite on the payment queue.
func TestConformance(t *testing.T) {
	t.Parallel()
	dsn, pool := pgtest.NewDB(t)
	m, err := postgres.NewMigrator(dsn, relaySchema)
	if err != nil {
		t.Fatal(err)
	}
	defer func() { _ = m.Close() }()
	if err := m.Up(context.Background()); err != nil {
		t.Fatal(err)
	}
	sourcetest.Run(t, &queueHarness{dsn: dsn, pool: pool})
}

// queueHarness makes each queue (its three tables, function and trigger,
// as `migrate` makes them) in a schema of its own, in one database.
type queueHarness struct {
	dsn  string
	pool *pgxpool.Pool
}

func (h *queueHarness) Presets() []string { return []string{"payment-queue"} }

// Capabilities: a claim deletes its rows from the hot table and appends
// their DISPATCHING attempts in one committed statement; a participant has
// one dispatch in flight at most, in sequence order; only the reaper puts
// back a dispatch without an outcome; every claim is an attempt
// (attempt_count, attempt_no); a row is due at next_attempt_at; every row
// has a participant.
func (h *queueHarness) Capabilities(string) sourcetest.Capabilities {
	return sourcetest.Capabilities{
		OneInFlightPerKey:   true,
		ReleaseKeepsClaim:   true,
		RemovedAtClaim:      true,
		AttemptsCountClaims: true,
		KeyRequired:         true,
		ClaimsInDueOrder:    true,
		WholeSourceOnly:     true,
		OwnClaimOrder:       true,
	}
}

func (h *queueHarness) NewTable(t *testing.T, preset string) sourcetest.Table {
	t.Helper()
	ctx := context.Background()
	schema := "qt_" + pgtest.Suffix()
	t.Cleanup(func() { _, _ = h.pool.Exec(context.Background(), "DROP SCHEMA IF EXISTS "+schema+" CASCADE") })
	if err := queue.Migrate(ctx, h.dsn, schema); err != nil {
		t.Fatal(err)
	}
	tbl := postgres.Table{Schema: schema, Name: "payment_outbox_pending"}
	merged, explicit, err := layout.Merge(preset, layout.Spec{}, "")
	if err != nil {
		t.Fatal(err)
	}
	cols, err := postgres.Columns(ctx, h.pool, tbl)
	if err != nil {
		t.Fatal(err)
	}
	l, err := layout.Resolve(merged, explicit, tbl.String(), cols)
	if err != nil {
		t.Fatal(err)
	}
	return &queueTable{h: h, table: tbl, layout: l,
		archive: postgres.Table{Schema: schema, Name: "payment_outbox_attempts"}.String()}
}

type queueTable struct {
	h       *queueHarness
	table   postgres.Table
	archive string
	layout  *layout.Layout
}

func (tb *queueTable) newStore(t *testing.T, pool *pgxpool.Pool, src string) *queue.Store {
	t.Helper()
	st, err := queue.New(context.Background(), pool, queue.Options{Source: src, Table: tb.table, RelaySchema: relaySchema, Layout: tb.layout})
	if err != nil {
		t.Fatal(err)
	}
	return st
}

// Open ignores Options.Ordering (a participant's order always holds) and
// ClaimTimeout (the suite runs the reaper with it, see Reap).
func (tb *queueTable) Open(t *testing.T, o sourcetest.Options) sourcetest.Store {
	t.Helper()
	pool, k := pgtest.OwnPool(t, tb.h.dsn, tb.h.pool)
	return &queueStore{Store: tb.newStore(t, pool, o.Source), Killer: k}
}

// queueStore is a store whose connections Kill cuts.
type queueStore struct {
	*queue.Store
	pgtest.Killer
}

// Insert is seed 003's producer transaction: the participant's next
// sequence number, then the row, with the defaults' due and creation times.
// The row's key is its participant, its topic its rail.
func (tb *queueTable) Insert(t *testing.T, rows ...sourcetest.Row) []string {
	t.Helper()
	ctx := context.Background()
	ids := make([]string, len(rows))
	for i, r := range rows {
		if r.Key == "" {
			t.Fatal("a payment has a participant: the suite inserts no keyless rows (KeyRequired)")
		}
		err := pgx.BeginFunc(ctx, tb.h.pool, func(tx pgx.Tx) error {
			var seq int64
			if err := tx.QueryRow(ctx, "SELECT "+tb.table.Schema+".bump_participant_outbox_seq($1)", r.Key).Scan(&seq); err != nil {
				return err
			}
			return tx.QueryRow(ctx, "INSERT INTO "+tb.table.String()+` (instruction_id, participant_id, sequence_id,
  idempotency_key, rail_type, payload) VALUES ('ins-' || $1, $2, $3, $1, $4, $5::jsonb) RETURNING outbox_id::text`,
				pgtest.Suffix(), r.Key, seq, r.Topic, r.Payload).Scan(&ids[i])
		})
		if err != nil {
			t.Fatalf("insert: %v", err)
		}
	}
	return ids
}

// State reads a row from the hot table and its latest attempt: pending
// while in the hot table (its attempt count there); claimed while only its
// DISPATCHING attempt is in the archive; published or failed by the latest
// attempt's outcome (its attempt number the count).
func (tb *queueTable) State(t *testing.T, id string) sourcetest.RowState {
	t.Helper()
	q := `SELECT h.outbox_id IS NOT NULL, a.state, COALESCE(h.attempt_count, a.attempt_no, 0)
FROM (SELECT $1::uuid AS id) x
LEFT JOIN ` + tb.table.String() + ` h ON h.outbox_id = x.id
LEFT JOIN LATERAL (SELECT state, attempt_no FROM ` + tb.archive + ` WHERE outbox_id = x.id
  ORDER BY attempt_no DESC, state = 'DISPATCHING', created_at DESC LIMIT 1) a ON true`
	var (
		hot    bool
		latest *string
		st     sourcetest.RowState
	)
	if err := tb.h.pool.QueryRow(context.Background(), q, id).Scan(&hot, &latest, &st.Attempts); err != nil {
		t.Fatalf("row state: %v", err)
	}
	st.Exists = hot || latest != nil
	st.Pending = hot
	if !hot && latest != nil {
		st.Published = *latest == "DISPATCHED"
		st.Failed = *latest == "FAILED"
	}
	return st
}

func (tb *queueTable) DeadLetters(t *testing.T, id string) []sourcetest.DeadLetter {
	return pgtest.DeadLetters(t, tb.h.pool, tb.table.Schema, tb.table.Name, id)
}

func (tb *queueTable) Totals(t *testing.T, src string) source.Stats {
	return pgtest.Totals(t, tb.h.pool, src)
}

// ClaimElsewhere is never called: the layout records no claims of other
// relays (state.batch_id).
func (tb *queueTable) ClaimElsewhere(t *testing.T, _ string, _ time.Time) {
	t.Fatal("the queue records no foreign claims")
}

// Reap runs the queue's reaper once.
func (tb *queueTable) Reap(t *testing.T, olderThan time.Duration) int {
	t.Helper()
	zs, err := tb.newStore(t, tb.h.pool, "reaper").Reap(context.Background(), olderThan)
	if err != nil {
		t.Fatal(err)
	}
	return len(zs)
}
