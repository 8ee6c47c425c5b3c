package breaker

import (
	"context"
	"errors"
	"sync"
	"testing"
	"time"

	"github.com/outbox-relay/outbox-relay/internal/sink"
)

// fake answers each call with the errors answer returns; block, when set,
// makes calls wait until their context ends.
type fake struct {
	mu     sync.Mutex
	calls  int
	answer func() error
	block  bool
	closed chan struct{} // Close waits on it when not nil
}

func (f *fake) Publish(ctx context.Context, msgs []*sink.Message) []error {
	f.mu.Lock()
	f.calls++
	block, answer := f.block, f.answer
	f.mu.Unlock()
	if block {
		<-ctx.Done()
		return fill(len(msgs), ctx.Err())
	}
	return fill(len(msgs), answer())
}
func (f *fake) MaxMessageBytes() int { return 0 }
func (f *fake) Close(ctx context.Context) error {
	if f.closed != nil {
		<-f.closed
	}
	return nil
}
func (f *fake) count() int { f.mu.Lock(); defer f.mu.Unlock(); return f.calls }

type clock struct{ t time.Time }

func (c *clock) now() time.Time          { return c.t }
func (c *clock) advance(d time.Duration) { c.t = c.t.Add(d) }

var msgs = []*sink.Message{{ID: "1"}, {ID: "2"}}

func newTest(f *fake) (*Publisher, *clock, *[]State) {
	c := &clock{t: time.Unix(1000, 0)}
	var states []State
	p := New(f, Options{Name: "s", Timeout: 50 * time.Millisecond, Failures: 3, Cooldown: time.Second,
		MaxCooldown: 3 * time.Second, Now: c.now, OnState: func(s State) { states = append(states, s) }})
	return p, c, &states
}

func unavailable(t *testing.T, res []error) time.Time {
	t.Helper()
	var until time.Time
	for _, err := range res {
		u, ok := sink.IsUnavailable(err)
		if !ok {
			t.Fatalf("result %v, want unavailable", err)
		}
		until = u
	}
	return until
}

func TestRetryableFailuresOpenTheCircuit(t *testing.T) {
	f := &fake{answer: func() error { return errors.New("connection refused") }}
	p, c, states := newTest(f)
	for range 3 {
		for _, err := range p.Publish(context.Background(), msgs) {
			if _, ok := sink.IsUnavailable(err); ok || err == nil {
				t.Fatalf("a failing call's result %v, want its own error", err)
			}
		}
	}
	if s, _ := p.State(); s != Open {
		t.Fatalf("state %v after 3 failed calls, want open", s)
	}
	until := unavailable(t, p.Publish(context.Background(), msgs))
	if f.count() != 3 {
		t.Errorf("%d calls reached the sink, want 3 (none while open)", f.count())
	}
	if want := c.now().Add(time.Second); !until.Equal(want) {
		t.Errorf("unavailable until %v, want %v", until, want)
	}
	// After the cooldown one probe goes; its failure doubles the cooldown.
	c.advance(time.Second)
	p.Publish(context.Background(), msgs)
	if f.count() != 4 {
		t.Fatalf("%d calls, want the probe as the 4th", f.count())
	}
	if until := unavailable(t, p.Publish(context.Background(), msgs)); !until.Equal(c.now().Add(2 * time.Second)) {
		t.Errorf("after a failed probe, unavailable until %v, want cooldown doubled", until.Sub(c.now()))
	}
	c.advance(2 * time.Second)
	p.Publish(context.Background(), msgs)
	if until := unavailable(t, p.Publish(context.Background(), msgs)); !until.Equal(c.now().Add(3 * time.Second)) {
		t.Errorf("cooldown %v, want the maximum, 3s", until.Sub(c.now()))
	}
	// A successful probe closes the circuit and resets the cooldown.
	f.answer = func() error { return nil }
	c.advance(3 * time.Second)
	if res := p.Publish(context.Background(), msgs); res[0] != nil {
		t.Fatalf("probe: %v", res[0])
	}
	if s, _ := p.State(); s != Closed {
		t.Fatalf("state %v after a good probe, want closed", s)
	}
	want := []State{Open, HalfOpen, Open, HalfOpen, Open, HalfOpen, Closed}
	if len(*states) != len(want) {
		t.Fatalf("states %v, want %v", *states, want)
	}
	for i := range want {
		if (*states)[i] != want[i] {
			t.Fatalf("states %v, want %v", *states, want)
		}
	}
}

func TestTerminalFailuresAndSuccessKeepItClosed(t *testing.T) {
	n := 0
	f := &fake{answer: func() error {
		n++
		if n%3 == 0 {
			return nil // a success resets the count
		}
		return errors.New("broker down")
	}}
	p, _, _ := newTest(f)
	for range 9 {
		p.Publish(context.Background(), msgs)
	}
	f.answer = func() error { return sink.Terminal(errors.New("no such queue")) }
	for range 5 {
		p.Publish(context.Background(), msgs)
	}
	if s, _ := p.State(); s != Closed {
		t.Fatalf("state %v: terminal failures and interleaved successes opened the circuit", s)
	}
}

func TestDeadlineOpensAtOnce(t *testing.T) {
	f := &fake{block: true}
	p, c, _ := newTest(f)
	start := time.Now()
	until := unavailable(t, p.Publish(context.Background(), msgs))
	if time.Since(start) > 5*time.Second {
		t.Fatalf("a stalled call took %v", time.Since(start))
	}
	if s, _ := p.State(); s != Open {
		t.Fatalf("state %v after a call passed its deadline, want open", s)
	}
	if !until.Equal(c.now().Add(time.Second)) {
		t.Errorf("until %v, want now + cooldown", until)
	}
	// The caller's own cancellation is not the sink's fault.
	q, _, _ := newTest(&fake{block: true})
	ctx, cancel := context.WithCancel(context.Background())
	cancel()
	for _, err := range q.Publish(ctx, msgs) {
		if _, ok := sink.IsUnavailable(err); ok || !errors.Is(err, context.Canceled) {
			t.Fatalf("cancelled call: %v", err)
		}
	}
	if s, _ := q.State(); s != Closed {
		t.Errorf("state %v after the caller cancelled, want closed", s)
	}
}

func TestStaleResultsAreIgnored(t *testing.T) {
	f := &fake{answer: func() error { return errors.New("down") }}
	p, _, _ := newTest(f)
	gen, probe, _, _ := p.admit() // a call begins while closed
	for range 3 {
		p.Publish(context.Background(), msgs)
	}
	p.record(gen, probe, answered) // and answers after the circuit opened
	if s, _ := p.State(); s != Open {
		t.Fatalf("state %v: a result older than the opening closed the circuit", s)
	}
}

func TestHalfOpenLetsOneProbe(t *testing.T) {
	f := &fake{answer: func() error { return errors.New("down") }}
	p, c, _ := newTest(f)
	for range 3 {
		p.Publish(context.Background(), msgs)
	}
	c.advance(time.Second)
	if _, probe, _, ok := p.admit(); !ok || !probe {
		t.Fatal("no probe after the cooldown")
	}
	if _, _, _, ok := p.admit(); ok {
		t.Fatal("a second call went through while the probe is out")
	}
}

func TestCloseIsBounded(t *testing.T) {
	f := &fake{closed: make(chan struct{})}
	defer close(f.closed)
	p, _, _ := newTest(f)
	ctx, cancel := context.WithTimeout(context.Background(), 50*time.Millisecond)
	defer cancel()
	if err := p.Close(ctx); !errors.Is(err, context.DeadlineExceeded) {
		t.Fatalf("close of a hung sink: %v, want the deadline", err)
	}
}

func TestStatusInAWord(t *testing.T) {
	fail := true
	f := &fake{answer: func() error {
		if fail {
			return errors.New("connection refused")
		}
		return nil
	}}
	p, c, _ := newTest(f)
	steps := []struct {
		do   func()
		want string
	}{
		{func() {}, "ok"},
		{func() { p.Publish(context.Background(), msgs) }, "failing"},
		{func() { p.Publish(context.Background(), msgs); p.Publish(context.Background(), msgs) }, "circuit open"},
		{func() { c.advance(time.Second); fail = false; p.Publish(context.Background(), msgs) }, "ok"},
	}
	for i, s := range steps {
		s.do()
		if got := p.Status(); got != s.want {
			t.Fatalf("step %d: status %q, want %q", i, p.Status(), s.want)
		}
	}
}

// After failed probes grew the cooldown, a good probe closes the circuit
// and resets it: the next opening waits the initial cooldown, not the
// grown one.
func TestCooldownResetsAfterAGoodProbe(t *testing.T) {
	fail := true
	f := &fake{answer: func() error {
		if fail {
			return errors.New("connection refused")
		}
		return nil
	}}
	p, c, _ := newTest(f)
	failThrice := func() {
		for range 3 {
			p.Publish(context.Background(), msgs)
		}
		if s, _ := p.State(); s != Open {
			t.Fatalf("state %v after 3 failed calls, want open", s)
		}
	}
	failThrice()
	c.advance(time.Second)
	p.Publish(context.Background(), msgs) // failed probe: cooldown 2s
	if until := unavailable(t, p.Publish(context.Background(), msgs)); !until.Equal(c.now().Add(2 * time.Second)) {
		t.Fatalf("cooldown %v after a failed probe, want 2s", until.Sub(c.now()))
	}
	c.advance(2 * time.Second)
	fail = false
	if res := p.Publish(context.Background(), msgs); res[0] != nil {
		t.Fatalf("probe: %v", res[0])
	}
	if s, _ := p.State(); s != Closed {
		t.Fatalf("state %v after a good probe, want closed", s)
	}
	fail = true
	failThrice()
	if until := unavailable(t, p.Publish(context.Background(), msgs)); !until.Equal(c.now().Add(time.Second)) {
		t.Errorf("cooldown %v after a good probe and new failures, want the initial 1s", until.Sub(c.now()))
	}
	// And the next failed probe doubles from the initial cooldown.
	c.advance(time.Second)
	p.Publish(context.Background(), msgs)
	if until := unavailable(t, p.Publish(context.Background(), msgs)); !until.Equal(c.now().Add(2 * time.Second)) {
		t.Errorf("cooldown %v after the next failed probe, want 2s", until.Sub(c.now()))
	}
}
