// Package breaker isolates a sink from the others of a source: every call
// gets a deadline, and a circuit stops calling a sink that keeps failing or
// stalls. While the circuit is open, messages fail at once as unavailable,
// which the engine answers by leaving the rows pending with their keys held,
// so a broken destination holds no pipeline slot.
package breaker

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"sync"
	"time"

	"github.com/outbox-relay/outbox-relay/internal/sink"
)

// ErrOpen is the cause of an unavailable message while the circuit is open.
var ErrOpen = errors.New("circuit open")

// State is the circuit's state.
type State int

const (
	Closed   State = iota // calls go through
	HalfOpen              // one probe call goes through
	Open                  // no call goes through
)

func (s State) String() string {
	return [...]string{"closed", "half-open", "open"}[s]
}

// Options configure a Publisher.
type Options struct {
	Name string
	// Timeout bounds each call; a call past it opens the circuit at once.
	Timeout time.Duration
	// Failures is how many calls in a row that fail (retryably) open the
	// circuit.
	Failures int
	// Cooldown is how long the circuit stays open before a probe; it
	// doubles after each failed probe, up to MaxCooldown.
	Cooldown, MaxCooldown time.Duration
	// OnState, when set, is told every state change.
	OnState func(State)
	Logger  *slog.Logger
	// Now is the clock; time.Now when nil.
	Now func() time.Time
}

// Publisher wraps a sink with a deadline per call and a circuit breaker.
type Publisher struct {
	inner sink.Publisher
	o     Options

	mu       sync.Mutex
	state    State
	gen      uint64 // bumped on every state change: older calls' results are stale
	fails    int
	cooldown time.Duration
	until    time.Time // open until
	cause    error     // why the circuit last opened
}

// New wraps inner.
func New(inner sink.Publisher, o Options) *Publisher {
	if o.Now == nil {
		o.Now = time.Now
	}
	if o.Logger == nil {
		o.Logger = slog.New(slog.DiscardHandler)
	}
	o.Failures = max(o.Failures, 1)
	o.Cooldown = max(o.Cooldown, time.Millisecond)
	o.MaxCooldown = max(o.MaxCooldown, o.Cooldown)
	return &Publisher{inner: inner, o: o, cooldown: o.Cooldown}
}

// State is the circuit's state and, when not closed, why it opened.
func (p *Publisher) State() (State, error) {
	p.mu.Lock()
	defer p.mu.Unlock()
	return p.state, p.cause
}

// Status is the sink's state in a word for operators: "ok", "failing"
// (calls fail, the circuit still closed), "half-open" (probing) or
// "circuit open" (its rows wait).
func (p *Publisher) Status() string {
	p.mu.Lock()
	defer p.mu.Unlock()
	switch {
	case p.state == Open:
		return "circuit open"
	case p.state == HalfOpen:
		return "half-open"
	case p.fails > 0:
		return "failing"
	}
	return "ok"
}

// Unwrap returns the sink the breaker guards (for what only it can answer,
// such as which topics exist).
func (p *Publisher) Unwrap() sink.Publisher { return p.inner }

// MaxMessageBytes implements sink.Publisher.
func (p *Publisher) MaxMessageBytes() int { return p.inner.MaxMessageBytes() }

// Publish implements sink.Publisher.
func (p *Publisher) Publish(ctx context.Context, msgs []*sink.Message) []error {
	gen, probe, until, ok := p.admit()
	if !ok {
		return fill(len(msgs), sink.Unavailable(p.o.Name, until, ErrOpen))
	}
	cctx, cancel := context.WithTimeout(ctx, p.o.Timeout)
	defer cancel()
	done := make(chan []error, 1)
	go func() { done <- p.inner.Publish(cctx, msgs) }()
	select {
	case res := <-done:
		p.record(gen, probe, verdict(res))
		return res
	case <-cctx.Done():
		if ctx.Err() != nil {
			// The caller gave up (shutdown): not the sink's fault.
			return fill(len(msgs), fmt.Errorf("sink %s: %w", p.o.Name, ctx.Err()))
		}
		// The call is abandoned (its context is cancelled); it may still
		// deliver, which consumers see as a duplicate of the retry.
		until := p.trip(gen, probe, fmt.Errorf("no answer within %s", p.o.Timeout))
		return fill(len(msgs), sink.Unavailable(p.o.Name, until, fmt.Errorf("no answer within %s", p.o.Timeout)))
	}
}

// Close implements sink.Publisher; it returns by ctx's deadline even when
// the sink's own Close does not.
func (p *Publisher) Close(ctx context.Context) error {
	done := make(chan error, 1)
	go func() { done <- p.inner.Close(ctx) }()
	select {
	case err := <-done:
		return err
	case <-ctx.Done():
		return fmt.Errorf("close sink %s: %w", p.o.Name, ctx.Err())
	}
}

type outcome int

const (
	answered outcome = iota // something was delivered, or the messages were at fault
	failed                  // every message failed retryably
)

// verdict judges a call by its results: it failed when no message was
// delivered and some failed retryably. Terminal errors are the messages'
// fault and say the sink answered.
func verdict(res []error) outcome {
	retryable := false
	for _, err := range res {
		switch {
		case err == nil:
			return answered
		case !sink.IsTerminal(err):
			retryable = true
		}
	}
	if retryable {
		return failed
	}
	return answered
}

// admit says whether a call may go: always when closed; once per cooldown
// (the probe) when open.
func (p *Publisher) admit() (gen uint64, probe bool, until time.Time, ok bool) {
	p.mu.Lock()
	defer p.mu.Unlock()
	now := p.o.Now()
	switch p.state {
	case Closed:
		return p.gen, false, time.Time{}, true
	case Open:
		if now.Before(p.until) {
			return 0, false, p.until, false
		}
		p.set(HalfOpen, p.cause)
		return p.gen, true, time.Time{}, true
	}
	// Half-open: a probe is out; the others wait for its answer.
	return 0, false, now.Add(p.o.Cooldown), false
}

// record applies a finished call's outcome, unless the state changed since
// the call began.
func (p *Publisher) record(gen uint64, probe bool, o outcome) {
	p.mu.Lock()
	defer p.mu.Unlock()
	if gen != p.gen {
		return
	}
	if o == answered {
		p.fails = 0
		p.cooldown = p.o.Cooldown
		if p.state != Closed {
			p.set(Closed, nil)
		}
		return
	}
	p.fails++
	if probe || p.fails >= p.o.Failures {
		p.open(probe, fmt.Errorf("%d calls in a row failed", p.fails))
	}
}

// trip opens the circuit after a call passed its deadline, and returns
// when the sink may be tried again.
func (p *Publisher) trip(gen uint64, probe bool, cause error) time.Time {
	p.mu.Lock()
	defer p.mu.Unlock()
	if gen == p.gen {
		p.open(probe, cause)
	}
	if p.state == Closed {
		return p.o.Now()
	}
	return p.until
}

// open opens the circuit; after a failed probe the cooldown doubles.
func (p *Publisher) open(probe bool, cause error) {
	if probe {
		p.cooldown = min(2*p.cooldown, p.o.MaxCooldown)
	}
	p.until = p.o.Now().Add(p.cooldown)
	p.fails = 0
	p.set(Open, cause)
}

func (p *Publisher) set(s State, cause error) {
	from := p.state
	p.state, p.cause = s, cause
	p.gen++
	switch {
	case s == Open:
		p.o.Logger.Warn("sink circuit open: its rows stay pending until it answers", "sink", p.o.Name,
			"cause", cause, "retry_in", p.cooldown)
	case s == Closed && from != Closed:
		p.o.Logger.Info("sink circuit closed", "sink", p.o.Name)
	}
	if p.o.OnState != nil {
		p.o.OnState(s)
	}
}

func fill(n int, err error) []error {
	out := make([]error, n)
	for i := range out {
		out[i] = err
	}
	return out
}

// Ping reports an open circuit, else asks the sink when it can be pinged.
func (p *Publisher) Ping(ctx context.Context) error {
	if s, cause := p.State(); s != Closed {
		return fmt.Errorf("circuit %s: %v", s, cause)
	}
	if pp, ok := p.inner.(interface{ Ping(context.Context) error }); ok {
		return pp.Ping(ctx)
	}
	return nil
}
