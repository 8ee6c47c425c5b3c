package e2e

import (
	"context"
	"fmt"
	"math/rand/v2"
	"path/filepath"
	"runtime"
	"slices"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgxpool"

	"github.com/outbox-relay/outbox-relay/internal/config"
	"github.com/outbox-relay/outbox-relay/internal/fixtures"
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
		Sinks: map[string]config.Sink{"rail": {Type: "webhook", Blocks: config.Blocks{"webhook": &webhook.Config{
			URL: r.srv.URL + "/payments", Timeout: timeout, ReferencePath: "reference",
			ErrorCodes: webhook.ErrorCodes{Path: "code", Codes: map[string]string{"AC01": "terminal", "AM04": "retryable"}}}}}},
		Sources:  []config.Source{src},
		Shutdown: config.Shutdown{Timeout: config.Duration(5 * time.Second)},
		LeaseTTL: config.Duration(2 * time.Second),
	}
	cfg.ApplyDefaults()
	return cfg
}

// enqueuePayment is seed 003's producer transaction; every instruction
// of these tests is new.
func enqueuePayment(t *testing.T, pool *pgxpool.Pool, participant, instruction, payload string) (string, int64) {
	t.Helper()
	id, seq, err := fixtures.EnqueuePayment(context.Background(), pool, participant, instruction, instruction+"-key", payload)
	if err != nil {
		t.Fatalf("enqueue %s: %v", instruction, err)
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

// queueProcConfig writes the configuration of a relay process that
// relays the queue to r, with a short reaper.
func queueProcConfig(t *testing.T, dsn string, r *rail) string {
	t.Helper()
	return writeYAML(t, fmt.Sprintf(`log: {level: info, format: text}
admin: {listen: "off"}
shutdown: {timeout: 5s}
lease_ttl: 2s
databases:
  main: {dsn: %q}
sinks:
  rail:
    type: webhook
    timeout: 2500ms
    webhook: {url: %q, timeout: 2s, reference_path: reference, error_codes: {path: code, codes: {AC01: terminal}}}
sources:
  - name: payments
    table: payments.payment_outbox_pending
    preset: payment-queue
    manage_table: true
    max_attempts: 1000
    backoff: {initial: 20ms, max: 200ms}
    reaper: {timeout: 3s, interval: 1s}
`, dsn, r.srv.URL+"/payments"))
}

// TestQueueReaperAfterSIGKILL kills the relay while the rail holds a
// dispatch: the next relay's reaper records the attempt as a zombie and
// puts the row back, and it is dispatched again (same idempotency key)
// within the reaper's timeout plus one interval of the claim; the
// participant's next payment waits for it.
func TestQueueReaperAfterSIGKILL(t *testing.T) {
	dsn, pool := pgtest.NewDB(t)
	bin := buildRelay(t)
	held := make(chan string, 1)
	r := newRail(t, func(c railCall) answer {
		if c.Seq == 1 && c.N == 1 {
			held <- c.ID
			return answer{status: 200, body: `{"reference": "never seen"}`, delay: time.Hour} // until the relay dies
		}
		return ok(ref(c.ID))
	})
	cfg := queueProcConfig(t, dsn, r)
	first := startRelay(t, bin, cfg)
	waitQueueTables(t, pool)
	x, _ := enqueuePayment(t, pool, "p1", "x", payment(100))
	y, _ := enqueuePayment(t, pool, "p1", "y", payment(200))
	select {
	case id := <-held:
		if id != x {
			t.Fatalf("the rail holds %s, want the first payment %s", id, x)
		}
	case <-time.After(20 * time.Second):
		t.Fatalf("the first payment never reached the rail:\n%s", first.out.String())
	}
	first.kill(t)
	var claimed time.Time
	if err := pool.QueryRow(context.Background(), "SELECT claimed_at FROM payments.payment_outbox_attempts WHERE outbox_id = $1::uuid AND attempt_no = 1", x).Scan(&claimed); err != nil {
		t.Fatal(err)
	}
	second := startRelay(t, bin, cfg)
	waitFor(t, 30*time.Second, "both payments dispatched", func() (bool, string) {
		var n int
		_ = pool.QueryRow(context.Background(), "SELECT count(*) FROM payments.payment_outbox_attempts WHERE state = 'DISPATCHED'").Scan(&n)
		return n == 2, fmt.Sprintf("%d of 2 dispatched", n)
	})
	second.checkOutput(t)
	calls, violations := r.snapshot()
	for _, v := range violations {
		t.Error(v)
	}
	var again *railCall
	var order []string
	for i, c := range calls {
		order = append(order, fmt.Sprintf("%d#%d", c.Seq, c.N))
		if c.ID == x && c.N == 2 {
			again = &calls[i]
		}
	}
	if again == nil {
		t.Fatalf("the rail never saw the first payment again (same idempotency key): %v", order)
	}
	// The reaper's bound: the timeout plus one interval, from the claim
	// (the clocks of the database and this test agree: same machine).
	if late := again.At.Sub(claimed); late > 3*time.Second+time.Second+2*time.Second {
		t.Errorf("dispatched again %s after its claim, want within the timeout (3s) plus one interval (1s), give or take two seconds (a loaded machine)", late)
	}
	if !slices.Equal(order, []string{"1#1", "1#2", "2#1"}) && !slices.Equal(order, []string{"1#2", "2#1", "1#1"}) {
		t.Errorf("the rail answered %v, want the held first payment, its dispatch again, then the second", order)
	}
	if got, want := attempts(t, pool, x), []string{"DISPATCHING - - -", "ZOMBIE_REQUEUE - - ZOMBIE_REQUEUE", "DISPATCHING - - -",
		"DISPATCHED ACCP " + ref(x) + " -"}; !slices.Equal(got, want) {
		t.Errorf("attempts of the killed dispatch:\n got %q\nwant %q", got, want)
	}
	if got := attempts(t, pool, y); len(got) != 2 || got[1] != "DISPATCHED ACCP "+ref(y)+" -" {
		t.Errorf("attempts of the second payment %q, want one dispatch", got)
	}
	if !strings.Contains(second.out.String(), "zombie dispatch put back") {
		t.Errorf("the relay did not log the zombie:\n%s", second.out.String())
	}
}

// TestQueueWakeups: NOTIFY alone drives dispatch (polls far apart), and so
// does the poll alone (notify off).
func TestQueueWakeups(t *testing.T) {
	for _, tc := range []struct {
		name   string
		notify string
		poll   config.Poll
	}{
		{"notify", "on", config.Poll{Min: config.Duration(10 * time.Minute), Max: config.Duration(10 * time.Minute),
			Fallback: config.Duration(time.Hour), Debounce: config.Duration(30 * time.Millisecond)}},
		{"poll", "off", config.Poll{Min: config.Duration(50 * time.Millisecond), Max: config.Duration(500 * time.Millisecond),
			Fallback: config.Duration(500 * time.Millisecond)}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			dsn, pool := pgtest.NewDB(t)
			r := newRail(t, func(c railCall) answer { return ok(ref(c.ID)) })
			src := queueSource(t, tc.poll)
			src.Notify = tc.notify
			runRelay(t, railConfig(dsn, r, 2*time.Second, src))
			// The relay's first claims found the queue empty; it now waits
			// for a notification, or its next poll.
			waitFor(t, 10*time.Second, "the relay's first claim", func() (bool, string) {
				var n int
				_ = pool.QueryRow(context.Background(), "SELECT count(*) FROM outbox_relay.relay_state WHERE source = 'payments'").Scan(&n)
				return n == 1, "no relay_state row yet"
			})
			for i := range 5 {
				enqueuePayment(t, pool, fmt.Sprintf("p%d", i), fmt.Sprintf("i%d", i), payment(100))
			}
			waitFor(t, 5*time.Second, "the payments dispatched", func() (bool, string) {
				calls, _ := r.snapshot()
				return len(calls) == 5, fmt.Sprintf("%d of 5 at the rail", len(calls))
			})
		})
	}
}

// TestChaosQueueLedger relays seed 003's queue to a rail that accepts,
// refuses (AC01), answers busy or too-many-requests, and times out at
// random, while two relay replicas are SIGKILLed and restarted in turn.
// The rail is idempotent, as rails are: a payment it accepted is accepted
// again with the same reference. At the end the archive and the rail
// reconcile: each payment settled once (DISPATCHED with the rail's
// reference, or FAILED with its code); no request without a DISPATCHING
// attempt claimed before it, nor more requests than attempts; one request
// at a time per participant, never past its first unsettled sequence.
func TestChaosQueueLedger(t *testing.T) {
	payments, participants, kills := 150, 6, 6
	if chaosFull() {
		payments, participants, kills = 1500, 20, 30
	}
	dsn, pool := pgtest.NewDB(t)
	bin := buildRelay(t)
	var mu sync.Mutex
	accepted := map[string]string{} // id -> reference the rail gave
	refused := map[string]bool{}
	r := newRail(t, func(c railCall) answer {
		mu.Lock()
		defer mu.Unlock()
		if ref, ok := accepted[c.ID]; ok {
			return answer{status: 200, body: fmt.Sprintf(`{"reference": %q, "code": "ACCP"}`, ref)}
		}
		if refused[c.ID] {
			return answer{status: 422, body: `{"code": "AC01"}`}
		}
		switch n := rand.N(100); {
		case n < 8:
			refused[c.ID] = true
			return answer{status: 422, body: `{"code": "AC01"}`}
		case n < 20:
			return answer{status: 503, body: `{"code": "RAIL_BUSY"}`}
		case n < 26:
			return answer{status: 429, body: `{"code": "RATE"}`}
		case n < 32:
			return answer{status: 200, delay: 1500 * time.Millisecond} // past the relay's timeout
		}
		ref := fmt.Sprintf("R-%s-%d", c.ID[len(c.ID)-8:], c.N)
		accepted[c.ID] = ref
		return answer{status: 200, body: fmt.Sprintf(`{"reference": %q, "code": "ACCP"}`, ref)}
	})
	cfg := writeYAML(t, fmt.Sprintf(`log: {level: warn, format: text}
admin: {listen: "off"}
shutdown: {timeout: 3s}
lease_ttl: 1500ms
databases:
  main: {dsn: %q}
sinks:
  rail:
    type: webhook
    timeout: 1200ms
    circuit: {failures: 1000}
    webhook: {url: %q, timeout: 1s, concurrency: 8, reference_path: reference, error_codes: {path: code, codes: {AC01: terminal}}}
sources:
  - name: payments
    table: payments.payment_outbox_pending
    preset: payment-queue
    manage_table: true
    batch_size: 20
    max_attempts: 1000
    backoff: {initial: 10ms, max: 100ms}
    poll: {min: 10ms, max: 200ms, fallback: 300ms}
    reaper: {timeout: 2s, interval: 300ms}
`, dsn, r.srv.URL+"/payments"))
	procs := []*relayProcess{startRelay(t, bin, cfg), startRelay(t, bin, cfg)}
	waitQueueTables(t, pool)
	// The producers: payments for random participants, a steady trickle.
	ids := map[string]bool{}
	var idsMu sync.Mutex
	done := make(chan struct{})
	var wg sync.WaitGroup
	for w := range 3 {
		wg.Go(func() {
			for i := w; i < payments; i += 3 {
				id, _ := enqueuePayment(t, pool, fmt.Sprintf("p%d", rand.N(participants)), fmt.Sprintf("i%d", i), payment(100+i))
				idsMu.Lock()
				ids[id] = true
				idsMu.Unlock()
				select {
				case <-done:
					return
				case <-time.After(time.Duration(rand.N(20)) * time.Millisecond):
				}
			}
		})
	}
	// The kills: a random replica every second or so, restarted at once.
	for range kills {
		time.Sleep(time.Duration(500+rand.N(1000)) * time.Millisecond)
		i := rand.N(len(procs))
		procs[i].kill(t)
		procs[i] = startRelay(t, bin, cfg)
	}
	wg.Wait()
	close(done)
	waitFor(t, 90*time.Second, "every payment settled", func() (bool, string) {
		var settled, pending, open int
		_ = pool.QueryRow(context.Background(), `SELECT
  (SELECT count(DISTINCT outbox_id) FROM payments.payment_outbox_attempts WHERE state IN ('DISPATCHED', 'FAILED')),
  (SELECT count(*) FROM payments.payment_outbox_pending),
  (SELECT count(*) FROM payments.payment_outbox_attempts a WHERE state = 'DISPATCHING' AND NOT EXISTS (
     SELECT 1 FROM payments.payment_outbox_attempts o WHERE o.outbox_id = a.outbox_id AND o.attempt_no = a.attempt_no AND o.state <> 'DISPATCHING'))`).
			Scan(&settled, &pending, &open)
		return settled == payments && pending == 0 && open == 0,
			fmt.Sprintf("%d of %d settled, %d pending, %d dispatching", settled, payments, pending, open)
	})
	for _, p := range procs {
		p.checkOutput(t)
	}

	// Reconcile the archive with the rail.
	calls, violations := r.snapshot()
	for _, v := range violations {
		t.Error(v)
	}
	type outcome struct {
		state, ref, code string
		n                int
	}
	settledBy := map[string]*outcome{}
	claims := map[string][]time.Time{} // id -> DISPATCHING claim times
	rows, err := pool.Query(context.Background(), `SELECT outbox_id::text, state, COALESCE(rail_reference, ''), COALESCE(rail_code, ''), claimed_at
FROM payments.payment_outbox_attempts`)
	if err != nil {
		t.Fatal(err)
	}
	var (
		id, state, rref, code string
		at                    time.Time
		zombies               int
	)
	_, err = pgx.ForEachRow(rows, []any{&id, &state, &rref, &code, &at}, func() error {
		switch state {
		case "DISPATCHING":
			claims[id] = append(claims[id], at)
		case "DISPATCHED", "FAILED":
			o := settledBy[id]
			if o == nil {
				o = &outcome{}
				settledBy[id] = o
			}
			o.state, o.ref, o.code = state, rref, code
			o.n++
		case "ZOMBIE_REQUEUE":
			zombies++
		}
		return nil
	})
	if err != nil {
		t.Fatal(err)
	}
	if len(ids) != payments {
		t.Fatalf("%d payments enqueued, want %d", len(ids), payments)
	}
	for id := range ids {
		o := settledBy[id]
		switch {
		case o == nil:
			t.Errorf("payment %s never settled", id)
		case o.n != 1:
			t.Errorf("payment %s settled %d times", id, o.n)
		case o.state == "DISPATCHED" && o.ref != accepted[id]:
			t.Errorf("payment %s DISPATCHED with reference %q, the rail gave %q", id, o.ref, accepted[id])
		case o.state == "FAILED" && (!refused[id] || o.code != "AC01"):
			t.Errorf("payment %s FAILED with code %q, but the rail did not refuse it", id, o.code)
		}
	}
	for id := range accepted {
		if o := settledBy[id]; o == nil || o.state != "DISPATCHED" {
			t.Errorf("the rail accepted %s, but the archive does not say DISPATCHED", id)
		}
	}
	perID := map[string]int{}
	for _, c := range calls {
		perID[c.ID]++
		before := 0
		for _, at := range claims[c.ID] {
			if !at.After(c.At) {
				before++
			}
		}
		if before < perID[c.ID] {
			t.Errorf("request %d of %s reached the rail with %d DISPATCHING attempts claimed before it", perID[c.ID], c.ID, before)
		}
	}
	t.Logf("%d payments, %d requests at the rail, %d accepted, %d refused, %d zombies reaped, %d kills",
		payments, len(calls), len(accepted), len(refused), zombies, kills)
}

// TestQueueMaxInFlight: a source's max_in_flight bounds its dispatches at
// the rail, whatever the sink's own concurrency.
func TestQueueMaxInFlight(t *testing.T) {
	t.Parallel()
	dsn, pool := pgtest.NewDB(t)
	r := newRail(t, func(c railCall) answer {
		a := ok(ref(c.ID))
		a.delay = 50 * time.Millisecond
		return a
	})
	src := queueSource(t, config.Poll{})
	src.MaxInFlight = 2
	runRelay(t, railConfig(dsn, r, 2*time.Second, src))
	waitQueueTables(t, pool)
	for i := range 12 {
		enqueuePayment(t, pool, fmt.Sprintf("p%d", i), fmt.Sprintf("i%d", i), payment(100))
	}
	waitFor(t, 20*time.Second, "the payments dispatched", func() (bool, string) {
		calls, _ := r.snapshot()
		return len(calls) == 12, fmt.Sprintf("%d of 12", len(calls))
	})
	r.mu.Lock()
	peak := r.peak
	r.mu.Unlock()
	if peak != 2 {
		t.Errorf("%d requests at the rail at once, want 2 (max_in_flight)", peak)
	}
}

// waitQueueTables waits until the relay's migrations have created the
// payment queue's tables.
func waitQueueTables(t *testing.T, pool *pgxpool.Pool) {
	t.Helper()
	waitFor(t, 20*time.Second, "the queue's tables", func() (bool, string) {
		var ok bool
		_ = pool.QueryRow(context.Background(), "SELECT to_regclass('payments.payment_outbox_pending') IS NOT NULL").Scan(&ok)
		return ok, "migrate has not created them yet"
	})
}
