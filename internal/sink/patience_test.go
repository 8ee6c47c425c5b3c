package sink

import (
	"context"
	"errors"
	"slices"
	"sync"
	"testing"
	"time"
)

// gate is a sink whose calls answer only when the test opens them: each
// call announces what it carries, then waits for its answer.
type gate struct {
	calls  chan []string // the ids of each call, as it starts
	answer chan []error  // one answer per call, in the order they wait
	ended  chan struct{} // a call answered has filled its receipts
	mu     sync.Mutex
	sent   [][]string
}

func newGate() *gate {
	return &gate{calls: make(chan []string, 16), answer: make(chan []error), ended: make(chan struct{}, 16)}
}

func (g *gate) Publish(ctx context.Context, msgs []*Message) []error {
	ids := make([]string, len(msgs))
	for i, m := range msgs {
		ids[i] = m.ID
	}
	g.mu.Lock()
	g.sent = append(g.sent, ids)
	g.mu.Unlock()
	g.calls <- ids
	select {
	case res := <-g.answer:
		for _, m := range msgs {
			if m.Receipt != nil {
				m.Receipt.Code = "answered " + m.ID
			}
		}
		g.ended <- struct{}{}
		return res
	case <-ctx.Done():
		return fill(len(msgs), ctx.Err())
	}
}

func (g *gate) MaxMessageBytes() int        { return 0 }
func (g *gate) Close(context.Context) error { return nil }

func fill(n int, err error) []error {
	out := make([]error, n)
	for i := range out {
		out[i] = err
	}
	return out
}

func msgs(idKeys ...string) []*Message {
	var out []*Message
	for i := 0; i+1 < len(idKeys); i += 2 {
		m := &Message{ID: idKeys[i]}
		if idKeys[i+1] != "" {
			m.Key = []byte(idKeys[i+1])
		}
		out = append(out, m)
	}
	return out
}

// causes is, for each result, "ok", or the cause of an unavailable message.
func causes(t *testing.T, res []error) []string {
	t.Helper()
	out := make([]string, len(res))
	for i, err := range res {
		switch {
		case err == nil:
			out[i] = "ok"
		case errors.Is(err, ErrNoAnswer):
			out[i] = "no answer"
		case errors.Is(err, ErrBudgetSpent):
			out[i] = "budget"
		case errors.Is(err, ErrStillSending):
			out[i] = "still sending"
		default:
			out[i] = err.Error()
		}
		if _, ok := IsUnavailable(err); err != nil && !ok && out[i] != err.Error() {
			t.Errorf("result %d (%v) is not reported unavailable", i, err)
		}
	}
	return out
}

// TestPatientPassesAnswers: a call that answers within the wait is
// answered as the sink answered.
func TestPatientPassesAnswers(t *testing.T) {
	g := newGate()
	p := NewPatient(g, "s", time.Minute, 1)
	done := make(chan []error)
	go func() { done <- p.Publish(context.Background(), msgs("1", "a", "2", "b")) }()
	<-g.calls
	refused := errors.New("refused")
	g.answer <- []error{nil, refused}
	res := <-done
	if res[0] != nil || !errors.Is(res[1], refused) {
		t.Fatalf("results %v, want the sink's own", res)
	}
}

// TestPatientReceipts: a call answered in time fills its messages'
// receipts; a call given up on fills only its own copies, never the
// caller's messages, which the caller reads as soon as it is answered
// unavailable (the race detector sees a shared write).
func TestPatientReceipts(t *testing.T) {
	g := newGate()
	p := NewPatient(g, "s", 20*time.Millisecond, 2)
	ctx := context.Background()
	m := msgs("1", "a")
	m[0].Receipt = &Receipt{}
	done := make(chan []error)
	go func() { done <- p.Publish(ctx, m) }()
	<-g.calls
	g.answer <- []error{nil}
	<-done
	if m[0].Receipt.Code != "answered 1" {
		t.Fatalf("receipt of a call answered in time = %+v, want the sink's", *m[0].Receipt)
	}

	late := msgs("2", "b")
	late[0].Receipt = &Receipt{}
	if got := causes(t, p.Publish(ctx, late)); !slices.Equal(got, []string{"no answer"}) {
		t.Fatalf("stalled call: %v", got)
	}
	<-g.calls
	got := *late[0].Receipt // the caller reads it now, as the engine does
	g.answer <- []error{nil}
	<-g.ended
	<-g.ended
	if got != (Receipt{}) || *late[0].Receipt != (Receipt{}) {
		t.Fatalf("receipt of a call given up on = %+v, then %+v; want it left alone", got, *late[0].Receipt)
	}
	// The message comes again (its row claimed again): answered delivered
	// from memory, with what the destination answered the call given up
	// on (the ended call's budget token may still be in use for a moment:
	// try until it is answered).
	for {
		again := msgs("2", "b")
		again[0].Receipt = &Receipt{}
		res := p.Publish(ctx, again)
		if errors.Is(res[0], ErrBudgetSpent) || errors.Is(res[0], ErrStillSending) {
			continue
		}
		if res[0] != nil || again[0].Receipt.Code != "answered 2" {
			t.Fatalf("the message again: %v, receipt %+v; want delivered with the late call's receipt", res[0], *again[0].Receipt)
		}
		break
	}
}

// TestPatientGivesUp: a call that does not answer within the wait is given
// up on, its messages reported unavailable; it goes on, and holds its place
// in the budget until it ends: meanwhile calls are refused without reaching
// the sink, and the messages it carries are not sent again. Once it ends,
// what it delivered is answered delivered without being sent again, ahead
// of its key only; what it failed is sent again.
func TestPatientGivesUp(t *testing.T) {
	g := newGate()
	p := NewPatient(g, "s", 10*time.Millisecond, 1)
	ctx := context.Background()
	res := p.Publish(ctx, msgs("1", "a", "2", "a", "3", "b"))
	if got := causes(t, res); !slices.Equal(got, []string{"no answer", "no answer", "no answer"}) {
		t.Fatalf("stalled call: %v", got)
	}
	<-g.calls
	// The budget (one call) is spent by the call given up on.
	if got := causes(t, p.Publish(ctx, msgs("9", "z"))); !slices.Equal(got, []string{"budget"}) {
		t.Fatalf("with the budget spent: %v", got)
	}
	// What it carries is not sent again, nor what follows on its keys; a
	// key it does not carry goes (and is refused by the budget here).
	if got := causes(t, p.Publish(ctx, msgs("1", "a", "4", "a", "3", "b", "5", ""))); !slices.Equal(got,
		[]string{"still sending", "still sending", "still sending", "budget"}) {
		t.Fatalf("while the call given up on runs: %v", got)
	}
	// It ends: 1 and 3 delivered, 2 failed.
	g.answer <- []error{nil, errors.New("nack"), nil}
	// Its end frees the budget and records its deliveries; wait for both
	// by the only thing that shows them, a call that is let through.
	var sent []string
	done := make(chan []error)
	for {
		go func() { done <- p.Publish(ctx, msgs("1", "a", "2", "a", "7", "a", "3", "c", "8", "")) }()
		select {
		case sent = <-g.calls:
		case r := <-done:
			if got := causes(t, r); slices.Contains(got, "budget") || slices.Contains(got, "still sending") {
				continue // the call given up on has not finished yet
			}
			t.Fatalf("answered without a call: %v", causes(t, r))
		}
		break
	}
	// 1 delivered, ahead of its key: answered from memory; 2 failed: sent,
	// and 7 after it; 3 delivered, first of key c: from memory.
	if !slices.Equal(sent, []string{"2", "7", "8"}) {
		t.Fatalf("sent %v, want 2, 7 and 8 (1 and 3 were delivered by the call given up on)", sent)
	}
	g.answer <- []error{nil, nil, nil}
	if got := causes(t, <-done); !slices.Equal(got, []string{"ok", "ok", "ok", "ok", "ok"}) {
		t.Fatalf("results %v", got)
	}
	// Remembered once: sent again the next time.
	go func() { done <- p.Publish(ctx, msgs("1", "a")) }()
	if ids := <-g.calls; !slices.Equal(ids, []string{"1"}) {
		t.Fatalf("sent %v", ids)
	}
	g.answer <- []error{nil}
	<-done
}

// TestPatientLateOnlyAheadOfKey: a message a call given up on delivered is
// answered from memory only when no earlier message of its key in the call
// is sent: else it is sent again, in its place.
func TestPatientLateOnlyAheadOfKey(t *testing.T) {
	g := newGate()
	p := NewPatient(g, "s", 10*time.Millisecond, 1)
	ctx := context.Background()
	p.Publish(ctx, msgs("2", "a"))
	<-g.calls
	g.answer <- []error{nil}
	done := make(chan []error)
	for {
		go func() { done <- p.Publish(ctx, msgs("1", "a", "2", "a")) }()
		select {
		case ids := <-g.calls:
			if !slices.Equal(ids, []string{"1", "2"}) {
				t.Fatalf("sent %v, want 1 then 2", ids)
			}
			g.answer <- []error{nil, nil}
			<-done
			return
		case <-done:
			// Refused while the call given up on had not finished.
		}
	}
}
