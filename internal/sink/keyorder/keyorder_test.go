package keyorder

import (
	"context"
	"errors"
	"fmt"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/outbox-relay/outbox-relay/internal/sink"
)

func msg(key string, seq int) *sink.Message {
	m := &sink.Message{ID: fmt.Sprintf("%s-%d", key, seq), Payload: fmt.Appendf(nil, "%d", seq)}
	if key != "" {
		m.Key = []byte(key)
	}
	return m
}

// recorder is a Send that records, per key, the order of sends and the
// most sends of one key in flight at once.
type recorder struct {
	msgs []*sink.Message
	fail func(i int) error

	mu        sync.Mutex
	order     map[string][]string
	inFlight  map[string]int
	maxPerKey int
	now, peak atomic.Int32
}

func newRecorder(msgs []*sink.Message) *recorder {
	return &recorder{msgs: msgs, order: map[string][]string{}, inFlight: map[string]int{}}
}

func (r *recorder) send(ctx context.Context, i int) error {
	k := sink.OrderKey(r.msgs[i])
	r.mu.Lock()
	r.order[k] = append(r.order[k], r.msgs[i].ID)
	r.inFlight[k]++
	if k != "" { // keyless messages have no order to keep
		r.maxPerKey = max(r.maxPerKey, r.inFlight[k])
	}
	r.mu.Unlock()
	n := r.now.Add(1)
	for p := r.peak.Load(); n > p && !r.peak.CompareAndSwap(p, n); p = r.peak.Load() {
	}
	time.Sleep(time.Millisecond)
	r.now.Add(-1)
	r.mu.Lock()
	r.inFlight[k]--
	r.mu.Unlock()
	if r.fail != nil {
		return r.fail(i)
	}
	return nil
}

func TestOrderAndConcurrency(t *testing.T) {
	t.Parallel()
	var msgs []*sink.Message
	for i := range 10 {
		for _, k := range []string{"a", "b", "c", "d", "e", "f"} {
			msgs = append(msgs, msg(k, i))
		}
		msgs = append(msgs, msg("", i)) // keyless
	}
	r := newRecorder(msgs)
	errs := Run(t.Context(), msgs, 4, r.send)
	for i, err := range errs {
		if err != nil {
			t.Fatalf("message %d: %v", i, err)
		}
	}
	for _, k := range []string{"a", "b", "c", "d", "e", "f"} {
		got := r.order[k]
		if len(got) != 10 {
			t.Fatalf("key %s: %d sends", k, len(got))
		}
		for i, id := range got {
			if want := fmt.Sprintf("%s-%d", k, i); id != want {
				t.Fatalf("key %s: send %d was %s, want %s", k, i, id, want)
			}
		}
	}
	if r.maxPerKey != 1 {
		t.Errorf("up to %d sends of one key in flight, want 1", r.maxPerKey)
	}
	if p := r.peak.Load(); p < 2 || p > 4 {
		t.Errorf("peak concurrency %d, want 2..4 (limit 4)", p)
	}
	if n := len(r.order[""]); n != 10 {
		t.Errorf("%d keyless sends, want 10", n)
	}
}

// TestKeysGoTogether blocks every send until all four keys are in flight:
// it only finishes if different keys are sent concurrently.
func TestKeysGoTogether(t *testing.T) {
	t.Parallel()
	msgs := []*sink.Message{msg("a", 0), msg("b", 0), msg("c", 0), msg("d", 0)}
	var wg sync.WaitGroup
	wg.Add(len(msgs))
	ctx, cancel := context.WithTimeout(t.Context(), 5*time.Second)
	defer cancel()
	errs := Run(ctx, msgs, 8, func(ctx context.Context, i int) error {
		wg.Done()
		done := make(chan struct{})
		go func() { wg.Wait(); close(done) }()
		select {
		case <-done:
			return nil
		case <-ctx.Done():
			return ctx.Err()
		}
	})
	for i, err := range errs {
		if err != nil {
			t.Fatalf("message %d: %v (keys were not sent concurrently)", i, err)
		}
	}
}

func TestRetryableFailureHoldsBackItsKey(t *testing.T) {
	t.Parallel()
	msgs := []*sink.Message{msg("a", 0), msg("b", 0), msg("a", 1), msg("b", 1), msg("a", 2)}
	boom := errors.New("nacked")
	r := newRecorder(msgs)
	r.fail = func(i int) error {
		if i == 2 { // a-1
			return boom
		}
		return nil
	}
	errs := Run(t.Context(), msgs, 4, r.send)
	if errs[0] != nil || errs[1] != nil || errs[3] != nil {
		t.Fatalf("unaffected messages failed: %v", errs)
	}
	if !errors.Is(errs[2], boom) {
		t.Fatalf("a-1: %v", errs[2])
	}
	if !errors.Is(errs[4], ErrHeldBack) || !errors.Is(errs[4], boom) || sink.IsTerminal(errs[4]) {
		t.Fatalf("a-2: want retryable ErrHeldBack wrapping the cause, got %v", errs[4])
	}
	if got := r.order["a"]; len(got) != 2 {
		t.Fatalf("key a sent %v, want a-0 and a-1 only", got)
	}
}

func TestTerminalFailureDoesNotStopItsKey(t *testing.T) {
	t.Parallel()
	msgs := []*sink.Message{msg("a", 0), msg("a", 1), msg("a", 2), nil}
	r := newRecorder(msgs)
	r.fail = func(i int) error {
		if i == 1 {
			return sink.Terminal(errors.New("unroutable"))
		}
		return nil
	}
	errs := Run(t.Context(), msgs, 4, r.send)
	if errs[0] != nil || errs[2] != nil || !sink.IsTerminal(errs[1]) {
		t.Fatalf("results %v", errs)
	}
	if !sink.IsTerminal(errs[3]) {
		t.Fatalf("nil message: %v", errs[3])
	}
}

func TestCancelledBeforeSending(t *testing.T) {
	t.Parallel()
	var msgs []*sink.Message
	for i := range 20 {
		msgs = append(msgs, msg(fmt.Sprint(i%5), i))
	}
	ctx, cancel := context.WithCancel(t.Context())
	var sent atomic.Int32
	errs := Run(ctx, msgs, 2, func(ctx context.Context, i int) error {
		sent.Add(1)
		cancel()
		return ctx.Err()
	})
	for i, err := range errs {
		if err == nil || sink.IsTerminal(err) || !errors.Is(err, context.Canceled) {
			t.Fatalf("message %d: want retryable cancellation, got %v", i, err)
		}
	}
	if n := sent.Load(); n > 5 { // at most one per key
		t.Errorf("%d sends after cancellation", n)
	}
}
