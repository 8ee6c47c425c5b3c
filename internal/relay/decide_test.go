package relay

import (
	"context"
	"errors"
	"fmt"
	"reflect"
	"slices"
	"testing"
	"time"

	"github.com/outbox-relay/outbox-relay/internal/order"
	"github.com/outbox-relay/outbox-relay/internal/sink"
	"github.com/outbox-relay/outbox-relay/internal/source"
)

// stubSink satisfies sink.Publisher; decide never publishes.
type stubSink struct{ max int }

func (s stubSink) Publish(context.Context, []*sink.Message) []error { panic("decide must not publish") }
func (s stubSink) MaxMessageBytes() int                             { return s.max }
func (s stubSink) Close(context.Context) error                      { return nil }

var (
	errBroker  = errors.New("broker not available")
	errHeldTst = errors.New("not sent: an earlier message with the same key failed")
	errBadTopc = sink.Terminal(errors.New("unknown topic"))
)

// step is one row of a decide scenario and what the sink did with it.
type step struct {
	key         string
	attempts    int   // failed attempts before this one
	maxAttempts int   // the row's own budget, 0 for the source's
	err         error // the sink's answer
	unbuilt     error // when set, buildMessage failed with it
	deferred    bool  // deferred before publishing (fenced or shutting down)
	payload     string
}

// runDecide builds a Worker and a published batch for steps and runs decide.
func runDecide(t *testing.T, ordering bool, maxAttempts int, steps []step) (*inflight, time.Time, time.Time) {
	t.Helper()
	w := NewWorker(Options{
		Name: "src", Sink: stubSink{}, Ordering: ordering, MaxAttempts: maxAttempts,
		Backoff: Backoff{Initial: time.Second, Max: time.Minute},
	})
	n := len(steps)
	f := &inflight{seq: 1, rows: make([]source.Row, n)}
	a := &attempt{f: f, msgs: make([]*sink.Message, n), errs: make([]error, n),
		results: make([]order.Result, n), at: make([]time.Time, n), keys: make([]string, n)}
	for i, s := range steps {
		payload := s.payload
		if payload == "" {
			payload = `{"n":1}`
		}
		f.rows[i] = source.Row{
			ID: fmt.Sprint(i + 1), Payload: []byte(payload), Topic: "t", TopicOK: true,
			OrderKey: s.key, Attempts: s.attempts, MaxAttempts: s.maxAttempts,
		}
		if ordering {
			a.keys[i] = s.key
		}
		switch {
		case s.unbuilt != nil:
			a.errs[i], a.results[i] = s.unbuilt, order.Invalid
		case s.deferred:
			a.msgs[i] = &sink.Message{ID: f.rows[i].ID}
			a.results[i] = order.NotSent
		default:
			a.msgs[i] = &sink.Message{ID: f.rows[i].ID}
			a.errs[i] = s.err
			a.results[i], a.at[i] = resultOf(s.err)
		}
	}
	before := time.Now()
	w.decide(a)
	return f, before, time.Now()
}

// retryView is a Retry without its time, which checkRetryAt checks.
type retryView struct {
	Index, Attempts int
	Err             string
}

// retries splits a batch's retry entries into charged retries and held
// rows (left pending with their attempts unchanged).
func retries(f *inflight) (charged []retryView, held []int) {
	for _, r := range f.outcome.Retry {
		if r.Attempts == f.rows[r.Index].Attempts {
			held = append(held, r.Index)
			continue
		}
		charged = append(charged, retryView{r.Index, r.Attempts, r.Err})
	}
	return charged, held
}

// checkRetryAt checks that each retry is due within the backoff of its
// attempt count (Initial 1s, Max 1m) from when decide ran.
func checkRetryAt(t *testing.T, f *inflight, before, after time.Time) {
	t.Helper()
	b := Backoff{Initial: time.Second, Max: time.Minute}
	for _, r := range f.outcome.Retry {
		if r.Attempts == f.rows[r.Index].Attempts {
			continue // held, not charged
		}
		nominal := b.Initial
		for i := 1; i < r.Attempts && nominal < b.Max; i++ {
			nominal *= 2
		}
		nominal = min(nominal, b.Max)
		lo, hi := before.Add(nominal/2), after.Add(nominal)
		if r.At.Before(lo) || r.At.After(hi) {
			t.Errorf("retry of row %d (attempt %d) at now+%v, want within now+[%v, %v]",
				r.Index, r.Attempts, r.At.Sub(before), nominal/2, nominal)
		}
	}
}

type decideWant struct {
	published []int
	retry     []retryView
	dead      []source.Dead
	deferred  []int
	violation int
}

func checkDecide(t *testing.T, f *inflight, want decideWant) {
	t.Helper()
	if !slices.Equal(f.outcome.Published, want.published) {
		t.Errorf("published = %v, want %v", f.outcome.Published, want.published)
	}
	got, held := retries(f)
	if !reflect.DeepEqual(got, want.retry) {
		t.Errorf("retry = %+v, want %+v", got, want.retry)
	}
	if !slices.Equal(held, want.deferred) || f.holds != len(want.deferred) {
		t.Errorf("held = %v (%d), want %v", held, f.holds, want.deferred)
	}
	if !reflect.DeepEqual(f.outcome.Dead, want.dead) {
		t.Errorf("dead = %+v, want %+v", f.outcome.Dead, want.dead)
	}
	if f.violation != want.violation {
		t.Errorf("violation = %d, want %d", f.violation, want.violation)
	}
}

func TestDecideOrderingDefersLaterRowsOfAFailedKey(t *testing.T) {
	steps := []step{
		0: {key: "A"},                              // published
		1: {key: "A", attempts: 2, err: errBroker}, // A's first failure: retry, attempt 3
		2: {key: "B"},                              // other key untouched
		3: {key: "A", err: errHeldTst},             // held back by row 1: deferred, not an attempt
		4: {key: "A", attempts: 4, err: errBroker}, // failed too: deferred, its own count kept
		5: {key: "B", err: errBroker},              // B's first failure: retry, attempt 1
		6: {key: "C", err: errBroker},              // a third key fails independently
		7: {key: "A", err: errBadTopc},             // terminal, but after A failed: held
	}
	f, before, after := runDecide(t, true, 5, steps)
	checkDecide(t, f, decideWant{
		published: []int{0, 2},
		retry: []retryView{
			{1, 3, errBroker.Error()},
			{5, 1, errBroker.Error()},
			{6, 1, errBroker.Error()},
		},
		deferred: []int{3, 4, 7},
	})
	checkRetryAt(t, f, before, after)
}

func TestDecideOrderingCountsViolations(t *testing.T) {
	steps := []step{
		0: {key: "A", err: errBroker},
		1: {key: "A"},                 // delivered after row 0 failed: a violation
		2: {key: "B"},                 // B never failed: fine
		3: {key: "A", err: errBroker}, // deferred
		4: {key: "A"},                 // another violation
		5: {key: "B", err: errBroker},
		6: {key: "B"}, // violation on B
	}
	f, before, after := runDecide(t, true, 5, steps)
	checkDecide(t, f, decideWant{
		// Rows that went out are recorded as published, violation or not.
		published: []int{1, 2, 4, 6},
		retry:     []retryView{{0, 1, errBroker.Error()}, {5, 1, errBroker.Error()}},
		deferred:  []int{3},
		violation: 3,
	})
	checkRetryAt(t, f, before, after)
}

func TestDecideOrderingOffRowsAreIndependent(t *testing.T) {
	// The same results as TestDecideOrderingDefersLaterRowsOfAFailedKey and
	// TestDecideOrderingCountsViolations, without ordering: every failure
	// is the row's own attempt and nothing is deferred or a violation.
	steps := []step{
		0: {key: "A"},
		1: {key: "A", attempts: 2, err: errBroker},
		2: {key: "B"},
		3: {key: "A", err: errHeldTst},
		4: {key: "A", attempts: 4, err: errBroker}, // 5th attempt: budget spent
		5: {key: "A"},
		6: {key: "A", err: errBadTopc},
	}
	f, before, after := runDecide(t, false, 5, steps)
	checkDecide(t, f, decideWant{
		published: []int{0, 2, 5},
		retry:     []retryView{{1, 3, errBroker.Error()}, {3, 1, errHeldTst.Error()}},
		dead: []source.Dead{
			{Index: 4, Attempts: 5, Reason: "retry budget spent after 5 attempts: " + errBroker.Error(), PayloadIsJSON: true, Exhausted: true},
			{Index: 6, Attempts: 1, Reason: "unknown topic", PayloadIsJSON: true},
		},
	})
	checkRetryAt(t, f, before, after)
}

func TestDecideTerminal(t *testing.T) {
	wrapped := fmt.Errorf("produce to topic %q: %w", "t", sink.Terminal(errors.New("record too large")))
	steps := []step{
		0: {key: "A", attempts: 3, err: errBadTopc},
		1: {key: "A"}, // the terminal row is dead-lettered, not retried: no violation
		2: {key: "B", err: wrapped, payload: "not json"},
		3: {key: "C", attempts: 1, unbuilt: sink.Terminal(errNoTopic), payload: "\xff"},
		4: {key: "C"},
	}
	for _, ordering := range []bool{true, false} {
		t.Run(fmt.Sprint("ordering=", ordering), func(t *testing.T) {
			f, _, _ := runDecide(t, ordering, 5, steps)
			checkDecide(t, f, decideWant{
				published: []int{1, 4},
				dead: []source.Dead{
					{Index: 0, Attempts: 4, Reason: "unknown topic", PayloadIsJSON: true},
					{Index: 2, Attempts: 1, Reason: `produce to topic "t": record too large`, PayloadIsJSON: false},
					{Index: 3, Attempts: 2, Reason: errNoTopic.Error(), PayloadIsJSON: false},
				},
			})
		})
	}
}

func TestDecideUnbuiltRowAfterAFailedKeyIsDead(t *testing.T) {
	// A row that cannot be built never reaches the sink: it is dead-lettered
	// even behind a failed row of its key.
	steps := []step{
		0: {key: "A", err: errBroker},
		1: {key: "A", unbuilt: sink.Terminal(errInvalidJSON), payload: "{"},
		2: {key: "A", err: errHeldTst},
	}
	f, _, _ := runDecide(t, true, 5, steps)
	checkDecide(t, f, decideWant{
		retry:    []retryView{{0, 1, errBroker.Error()}},
		dead:     []source.Dead{{Index: 1, Attempts: 1, Reason: errInvalidJSON.Error()}},
		deferred: []int{2},
	})
}

func TestDecideBudget(t *testing.T) {
	const sourceBudget = 3
	steps := []step{
		0: {key: "A", attempts: 1, err: errBroker},                  // 2 < 3: retry
		1: {key: "B", attempts: 2, err: errBroker},                  // 3 >= 3: dead
		2: {key: "C", attempts: 1, maxAttempts: 2, err: errBroker},  // own budget 2: dead
		3: {key: "D", attempts: 5, maxAttempts: 10, err: errBroker}, // own budget 10 beats the source's 3
		4: {key: "E", attempts: 9, maxAttempts: 10, err: errBroker}, // 10 >= 10: dead
		5: {key: "F", attempts: 0, maxAttempts: 1, err: errBroker},  // budget 1: no retry at all
		6: {key: "G", attempts: 7, err: errBroker},                  // already past the budget: dead
		7: {key: "B", err: errHeldTst},                              // behind B's exhausted row: deferred
		8: {key: "B"},                                               // delivered after B failed
	}
	f, before, after := runDecide(t, true, sourceBudget, steps)
	spent := func(i, n int) source.Dead {
		return source.Dead{Index: i, Attempts: n, PayloadIsJSON: true, Exhausted: true,
			Reason: fmt.Sprintf("retry budget spent after %d attempts: %v", n, errBroker)}
	}
	checkDecide(t, f, decideWant{
		published: []int{8},
		retry:     []retryView{{0, 2, errBroker.Error()}, {3, 6, errBroker.Error()}},
		dead:      []source.Dead{spent(1, 3), spent(2, 2), spent(4, 10), spent(5, 1), spent(6, 8)},
		deferred:  []int{7},
		violation: 1,
	})
	checkRetryAt(t, f, before, after)
}

func TestDecideStateDeferred(t *testing.T) {
	// Rows deferred before publishing (fenced, or the shutdown deadline)
	// are left pending whatever their slot holds, with or without ordering.
	steps := []step{
		0: {key: "A", deferred: true},
		1: {key: "A", deferred: true},
		2: {key: "B"},
		3: {key: "C", deferred: true},
	}
	for _, ordering := range []bool{true, false} {
		f, _, _ := runDecide(t, ordering, 5, steps)
		checkDecide(t, f, decideWant{published: []int{2}, deferred: []int{0, 1, 3}})
	}
}

func TestDecideKeylessRowsStandAlone(t *testing.T) {
	// Rows without a key have no order: one keyless row failing holds no
	// other keyless row back; each failure is its own attempt.
	steps := []step{
		0: {err: errBroker},
		1: {err: errBroker},
		2: {},
		3: {key: "x"},
	}
	f, _, _ := runDecide(t, true, 5, steps)
	checkDecide(t, f, decideWant{
		published: []int{2, 3},
		retry:     []retryView{{0, 1, errBroker.Error()}, {1, 1, errBroker.Error()}},
	})
}

func TestDecideUnavailableSinkHoldsUncharged(t *testing.T) {
	until := time.Now().Add(time.Minute)
	down := sink.Unavailable("k", until, errBroker)
	w := NewWorker(Options{Name: "src", Sink: stubSink{}, Ordering: true, MaxAttempts: 1,
		Backoff: Backoff{Initial: time.Second, Max: time.Minute}})
	f := &inflight{seq: 1, rows: []source.Row{{ID: "1", OrderKey: "A", Attempts: 0}, {ID: "2", OrderKey: "A"}}}
	a := &attempt{f: f, msgs: []*sink.Message{{ID: "1"}, {ID: "2"}}, errs: []error{down, down},
		results: []order.Result{order.Unavailable, order.Unavailable}, at: []time.Time{until, until}, keys: []string{"A", "A"}}
	w.decide(a)
	if len(f.outcome.Dead) != 0 || len(f.outcome.Retry) != 2 || f.holds != 2 {
		t.Fatalf("outcome = %+v; want both rows held, none dead even with a budget of 1", f.outcome)
	}
	for _, r := range f.outcome.Retry {
		if r.Attempts != 0 || !r.At.Equal(until) {
			t.Errorf("row %d held with %d attempts until %v; want 0 attempts until the sink's %v", r.Index, r.Attempts, r.At, until)
		}
	}
	if !f.held["A"].Equal(until) {
		t.Errorf("key A held until %v, want %v", f.held["A"], until)
	}
}

func TestDecideSinkDownChargesNothing(t *testing.T) {
	// The sink could not be reached: not the messages' fault. Even rows at
	// the end of their budget are held, not charged nor dead-lettered;
	// a message's own failure beside them is charged as ever.
	down := sink.Down(fmt.Errorf("connect: %w", errBroker))
	steps := []step{
		0: {key: "A", attempts: 4, err: down},
		1: {key: "A", err: down},
		2: {key: "B", attempts: 9, maxAttempts: 10, err: fmt.Errorf("publish: %w", down)},
		3: {key: "C", err: errBroker},
	}
	f, before, after := runDecide(t, true, 5, steps)
	checkDecide(t, f, decideWant{
		retry:    []retryView{{3, 1, errBroker.Error()}},
		deferred: []int{0, 1, 2},
	})
	checkRetryAt(t, f, before, after)
}

func TestDecideAllPublished(t *testing.T) {
	steps := []step{{key: "A"}, {key: "A"}, {key: "B"}}
	f, _, _ := runDecide(t, true, 5, steps)
	checkDecide(t, f, decideWant{published: []int{0, 1, 2}})
	if f.outcome.Retry != nil || f.outcome.Dead != nil || f.holds != 0 {
		t.Errorf("outcome = %+v, held = %d; want only published rows", f.outcome, f.holds)
	}
}
