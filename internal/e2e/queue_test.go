package e2e

import (
	"context"
	"errors"
	"fmt"
	"path/filepath"
	"runtime"
	"slices"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgconn"
	"github.com/jackc/pgx/v5/pgxpool"

	"github.com/outbox-relay/outbox-relay/internal/config"
	"github.com/outbox-relay/outbox-relay/internal/pgtest"
	"github.com/outbox-relay/outbox-relay/internal/sink/webhook"
	"github.com/outbox-relay/outbox-relay/internal/source"
)

// paymentSchema is the docs' example schema of a payment instruction.
func paymentSchema(t *testing.T) string {
	t.Helper()
	_, file, _, _ := runtime.Caller(0)
	return filepath.Join(filepath.Dir(file), "..", "..", "docs", "examples", "payment-instruction.schema.json")
}

// queueSource is seed 003's queue relayed to the rail: preset
// payment-queue, its tables created by migrate.
func queueSource(t *testing.T, poll config.Poll) config.Source {
	return config.Source{Name: "payments", Table: "payments.payment_outbox_pending", Preset: config.QueuePreset,
		ManageTable: ptrTo(true), Sink: "rail", Schema: paymentSchema(t), Poll: poll, MaxAttempts: 5,
		Backoff: config.Backoff{Initial: config.Duration(50 * time.Millisecond), Max: config.Duration(200 * time.Millisecond)}}
}

func ptrTo[T any](v T) *T { return &v }

// ref is the rail's reference for a payment in these tests.
func ref(id string) string { return "R-" + id[len(id)-12:] }

// railConfig is a configuration relaying the queue to r.
func railConfig(dsn string, r *rail, timeout time.Duration, src config.Source) *config.Config {
	cfg := &config.Config{
		Admin:     config.Admin{Listen: "off"},
		Databases: map[string]config.Database{"main": {DSN: dsn}},
		Sinks: map[string]config.Sink{"rail": {Type: "webhook", Webhook: &webhook.Config{
			URL: r.srv.URL + "/payments", Timeout: timeout, ReferencePath: "reference",
			ErrorCodes: webhook.ErrorCodes{Path: "code", Codes: map[string]string{"AC01": "terminal", "AM04": "retryable"}}}}},
		Sources:  []config.Source{src},
		Shutdown: config.Shutdown{Timeout: config.Duration(5 * time.Second)},
		LeaseTTL: config.Duration(2 * time.Second),
	}
	cfg.ApplyDefaults()
	return cfg
}

// enqueuePayment is the producer's transaction of seed 003: the
// participant's next sequence number, then the pending row.
func enqueuePayment(t *testing.T, pool *pgxpool.Pool, participant, instruction, payload string) (string, int64) {
	t.Helper()
	ctx := context.Background()
	var id string
	var seq int64
	err := pgx.BeginFunc(ctx, pool, func(tx pgx.Tx) error {
		if err := tx.QueryRow(ctx, "SELECT payments.bump_participant_outbox_seq($1)", participant).Scan(&seq); err != nil {
			return err
		}
		return tx.QueryRow(ctx, `INSERT INTO payments.payment_outbox_pending (instruction_id, participant_id, sequence_id,
  idempotency_key, rail_type, payload) VALUES ($1, $2, $3, $1 || '-key', 'sepa', $4::jsonb) RETURNING outbox_id::text`,
			instruction, participant, seq, payload).Scan(&id)
	})
	var pgErr *pgconn.PgError
	if errors.As(err, &pgErr) && pgErr.Code == "23505" {
		t.Fatalf("enqueue %s: %v", instruction, err)
	}
	if err != nil {
		t.Fatal(err)
	}
	return id, seq
}

func payment(amount int) string {
	return fmt.Sprintf(`{"amount": %d, "currency": "EUR", "destination": {"account": "DE89370400440532013000"}}`, amount)
}

// attempts lists an outbox id's attempts as "STATE code/ref/error".
func attempts(t *testing.T, pool *pgxpool.Pool, id string) []string {
	t.Helper()
	rows, err := pool.Query(context.Background(), `SELECT state || ' ' || COALESCE(rail_code, '-') || ' ' || COALESCE(rail_reference, '-')
  || ' ' || COALESCE(error_code, '-') FROM payments.payment_outbox_attempts WHERE outbox_id = $1::uuid ORDER BY attempt_no, created_at, state <> 'DISPATCHING'`, id)
	if err != nil {
		t.Fatal(err)
	}
	out, err := pgx.CollectRows(rows, pgx.RowTo[string])
	if err != nil {
		t.Fatal(err)
	}
	return out
}

// TestQueueDispatch relays seed 003's queue to a rail: each payment is
// dispatched in its participant's sequence, one at a time; a retryable
// answer is a RETRYABLE attempt and the row comes back; a terminal rail
// code and a payload the schema refuses are FAILED attempts, dead letters
// the relay lists and replays; the rail's reference and code are recorded.
func TestQueueDispatch(t *testing.T) {
	dsn, pool := pgtest.NewDB(t)
	var mu sync.Mutex
	script := map[string][]answer{} // outbox id -> answers in turn
	r := newRail(t, func(c railCall) answer {
		mu.Lock()
		defer mu.Unlock()
		if as := script[c.ID]; c.N <= len(as) {
			return as[c.N-1]
		}
		return ok(ref(c.ID))
	})
	cfg := railConfig(dsn, r, 2*time.Second, queueSource(t, config.Poll{}))
	a, _ := runApp(t, cfg)

	a1, _ := enqueuePayment(t, pool, "pa", "a1", payment(100))
	a2, _ := enqueuePayment(t, pool, "pa", "a2", payment(200))
	a3, _ := enqueuePayment(t, pool, "pa", "a3", payment(300))
	mu.Lock()
	script[a2] = []answer{{status: 503, body: `{"code": "RAIL_BUSY"}`}, {status: 422, body: `{"code": "AM04"}`}}
	mu.Unlock()
	b1, _ := enqueuePayment(t, pool, "pb", "b1", payment(100))
	mu.Lock()
	script[b1] = []answer{{status: 422, body: `{"code": "AC01"}`}}
	mu.Unlock()
	c1, _ := enqueuePayment(t, pool, "pc", "c1", payment(0)) // amount 0: the schema refuses it

	done := func() (bool, string) {
		var n int
		_ = pool.QueryRow(context.Background(), `SELECT count(*) FROM payments.payment_outbox_attempts WHERE state IN ('DISPATCHED', 'FAILED')`).Scan(&n)
		return n == 5, fmt.Sprintf("%d of 5 payments settled", n)
	}
	waitFor(t, 20*time.Second, "every payment settled", done)

	calls, violations := r.snapshot()
	for _, v := range violations {
		t.Error(v)
	}
	var pa []int64
	for _, c := range calls {
		if c.Participant == "pa" {
			pa = append(pa, c.Seq)
		}
		if strings.Contains(c.Body, `"amount": 0`) || strings.Contains(c.Body, `"amount":0`) {
			t.Errorf("the payment the schema refuses reached the rail: %s", c.Body)
		}
	}
	if !slices.Equal(pa, []int64{1, 2, 2, 2, 3}) {
		t.Errorf("the rail saw pa's sequence numbers %v, want 1, 2 (busy), 2 (AM04, retryable), 2, 3", pa)
	}
	for id, want := range map[string][]string{
		a1: {"DISPATCHING - - -", "DISPATCHED ACCP " + ref(a1) + " -"},
		a2: {"DISPATCHING - - -", "RETRYABLE RAIL_BUSY - RAIL_BUSY", "DISPATCHING - - -", "RETRYABLE AM04 - AM04",
			"DISPATCHING - - -", "DISPATCHED ACCP " + ref(a2) + " -"},
		a3: {"DISPATCHING - - -", "DISPATCHED ACCP " + ref(a3) + " -"},
		b1: {"DISPATCHING - - -", "FAILED AC01 - AC01"},
		c1: {"DISPATCHING - - -", "FAILED - - TERMINAL"},
	} {
		if got := attempts(t, pool, id); !slices.Equal(got, want) {
			t.Errorf("attempts of %s:\n got %q\nwant %q", id, got, want)
		}
	}
	var msg string
	if err := pool.QueryRow(context.Background(), `SELECT error_message FROM payments.payment_outbox_attempts WHERE outbox_id = $1::uuid AND state = 'FAILED'`, c1).Scan(&msg); err != nil || !strings.Contains(msg, "amount") {
		t.Errorf("the refused payment's FAILED attempt says %q (%v), want the schema's complaint about the amount", msg, err)
	}

	// The dead letters: listed with their reasons; a replay of b1 goes to
	// the rail again, which accepts it now.
	dl, err := a.ListFailed(context.Background(), "main", source.DLQFilter{Source: "payments"})
	if err != nil || len(dl) != 2 {
		t.Fatalf("dead letters %+v (%v), want b1 and c1", dl, err)
	}
	n, err := a.ReplayDead(context.Background(), "main", source.DLQFilter{Source: "payments", EventIDs: []string{b1}}, "test")
	if err != nil || n != 1 {
		t.Fatalf("replay of b1: %d %v", n, err)
	}
	waitFor(t, 10*time.Second, "the replayed payment dispatched", func() (bool, string) {
		got := attempts(t, pool, b1)
		return slices.Contains(got, "DISPATCHED ACCP "+ref(b1)+" -"), strings.Join(got, "; ")
	})
}
