package sink

import (
	"context"
	"errors"
	"fmt"
	"sync"
	"time"
)

// The causes of the unavailable messages a Patient reports.
var (
	// ErrNoAnswer: the call did not answer within the wait; it goes on in
	// the background.
	ErrNoAnswer = errors.New("no answer in time; the call goes on in the background")
	// ErrBudgetSpent: every call the budget allows is still running.
	ErrBudgetSpent = errors.New("its calls still running spend its budget")
	// ErrStillSending: a call given up on still carries the message (or
	// an earlier one of its key).
	ErrStillSending = errors.New("a call given up on still carries the message or an earlier one of its key")
)

// lateTTL is how long a Patient remembers what a call given up on
// delivered: far longer than the least hold of a row given back.
const lateTTL = 10 * time.Minute

// Patient is a Publisher whose callers wait at most a while for an answer,
// so that a sink that stalls holds no batch. A call still unanswered then is
// given up on: its messages are reported unavailable (the engine holds their
// rows, charged no attempt, and completes the rest of the batch), while the
// call goes on in the background until it ends (the sink's own deadline
// bounds it).
//
// At most budget calls run at once, answered or given up on; while they all
// run, messages are reported unavailable at once, without a call. So a sink
// that stalls holds at most budget calls' messages.
//
// A Patient remembers what its calls given up on carry: while such a call
// runs, its messages (and the later ones of their keys in a call) are not
// sent again but reported unavailable; once it ends, each message it
// delivered is answered delivered, without being sent again, the next time a
// call carries it ahead of its key's other messages. So a slow sink is not
// sent the same message twice by this process, and makes progress even when
// its calls take longer than the wait.
type Patient struct {
	p     Publisher
	name  string
	wait  time.Duration
	calls chan struct{} // a token per call running
	now   func() time.Time

	mu       sync.Mutex
	carrying map[string]int       // message ids in calls given up on still running (how many such calls)
	late     map[string]delivered // message ids such calls delivered
}

// NewPatient wraps p, named name in errors: callers wait at most wait for a
// call's answer, and at most budget calls run at once.
func NewPatient(p Publisher, name string, wait time.Duration, budget int) *Patient {
	return &Patient{p: p, name: name, wait: wait, calls: make(chan struct{}, max(budget, 1)), now: time.Now,
		carrying: map[string]int{}, late: map[string]delivered{}}
}

// Publish implements Publisher.
func (w *Patient) Publish(ctx context.Context, msgs []*Message) []error {
	errs := make([]error, len(msgs))
	send := w.sift(msgs, errs)
	if len(send) == 0 {
		return errs
	}
	select {
	case w.calls <- struct{}{}:
	default:
		for _, i := range send {
			errs[i] = Unavailable(w.name, time.Time{}, ErrBudgetSpent)
		}
		return errs
	}
	// A message whose receipt the sink fills is sent as a copy with a
	// receipt of its own, copied back only when the call answers in time:
	// a call given up on goes on writing to it after the caller has moved
	// on.
	part := make([]*Message, len(send))
	for j, i := range send {
		m := msgs[i]
		if m.Receipt != nil {
			c := *m
			c.Receipt = &Receipt{}
			m = &c
		}
		part[j] = m
	}
	done := make(chan []error)
	gaveUp := make(chan struct{})
	go func() {
		res := w.p.Publish(ctx, part)
		<-w.calls
		select {
		case done <- res:
		case <-gaveUp:
			w.ended(part, res)
		}
	}()
	timer := time.NewTimer(w.wait)
	defer timer.Stop()
	var cause error
	select {
	case res := <-done:
		for j, i := range send {
			errs[i] = res[j]
			if part[j] != msgs[i] {
				*msgs[i].Receipt = *part[j].Receipt
			}
		}
		return errs
	case <-timer.C:
		cause = fmt.Errorf("%w (waited %s)", ErrNoAnswer, w.wait)
	case <-ctx.Done():
		cause = ctx.Err()
	}
	w.carry(part)
	close(gaveUp)
	for _, i := range send {
		if ctx.Err() != nil {
			errs[i] = fmt.Errorf("sink %s: %w", w.name, cause)
			continue
		}
		errs[i] = Unavailable(w.name, time.Time{}, cause)
	}
	return errs
}

// sift answers, in errs, the messages a call given up on carries or
// delivered, and returns the indexes of those to send. A key's messages after
// one it answered unavailable are answered unavailable too; one answered
// delivered from memory is so only ahead of every message of its key sent.
func (w *Patient) sift(msgs []*Message, errs []error) []int {
	w.mu.Lock()
	defer w.mu.Unlock()
	if len(w.carrying) == 0 && len(w.late) == 0 {
		send := make([]int, len(msgs))
		for i := range send {
			send[i] = i
		}
		return send
	}
	now := w.now()
	const sending, stopped = 1, 2
	keys := map[string]int{}
	send := make([]int, 0, len(msgs))
	for i, m := range msgs {
		k := OrderKey(m)
		state := keys[k]
		switch {
		case k != "" && state == stopped:
			errs[i] = Unavailable(w.name, time.Time{}, ErrStillSending)
			continue
		case k != "" && state == sending:
		case w.carrying[m.ID] > 0:
			errs[i] = Unavailable(w.name, time.Time{}, ErrStillSending)
			if k != "" {
				keys[k] = stopped
			}
			continue
		default:
			if d, ok := w.late[m.ID]; ok {
				delete(w.late, m.ID)
				if now.Before(d.until) {
					if m.Receipt != nil && d.receipt != nil {
						*m.Receipt = *d.receipt
					}
					continue // delivered: errs[i] stays nil
				}
			}
		}
		if k != "" {
			keys[k] = sending
		}
		send = append(send, i)
	}
	return send
}

// carry records the messages of a call given up on.
func (w *Patient) carry(part []*Message) {
	w.mu.Lock()
	defer w.mu.Unlock()
	for _, m := range part {
		w.carrying[m.ID]++
	}
}

// ended records how a call given up on ended: what it delivered is
// remembered for a while.
func (w *Patient) ended(part []*Message, res []error) {
	w.mu.Lock()
	defer w.mu.Unlock()
	now := w.now()
	for id, d := range w.late {
		if !now.Before(d.until) {
			delete(w.late, id)
		}
	}
	for j, m := range part {
		if w.carrying[m.ID]--; w.carrying[m.ID] <= 0 {
			delete(w.carrying, m.ID)
		}
		if res[j] == nil {
			w.late[m.ID] = delivered{until: now.Add(lateTTL), receipt: m.Receipt}
		}
	}
}

// delivered is what a Patient remembers of a message a call given up on
// delivered: until when, and what the destination answered (nil when the
// sink fills no receipt).
type delivered struct {
	until   time.Time
	receipt *Receipt
}

// MaxMessageBytes implements Publisher.
func (w *Patient) MaxMessageBytes() int { return w.p.MaxMessageBytes() }

// Close is a no-op: the wrapped sink is shared and closed by its owner.
func (w *Patient) Close(context.Context) error { return nil }

// Unwrap returns the wrapped sink.
func (w *Patient) Unwrap() Publisher { return w.p }

// Status is the wrapped sink's (its circuit's), when it says.
func (w *Patient) Status() string {
	if s, ok := w.p.(interface{ Status() string }); ok {
		return s.Status()
	}
	return "ok"
}
