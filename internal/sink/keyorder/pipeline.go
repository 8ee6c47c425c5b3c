package keyorder

import (
	"context"
	"errors"
	"fmt"

	"github.com/outbox-relay/outbox-relay/internal/sink"
)

// ErrOvertaken is wrapped by the terminal error of a message that failed
// while a later message of its key, already sent, was delivered: sent
// again it would land after its successor, so it goes to the dead letters
// (where a replay can put it back) instead.
var ErrOvertaken = errors.New("a later message of its key was delivered")

// Start sends msgs[i] and returns how to wait for the broker's answer to
// it; an error means the message was not sent.
type Start func(ctx context.Context, i int) (wait func() error, err error)

// Pipeline is Run for a broker whose client sends a message at once and
// tells its answer later: one goroutine sends the first message of every
// key, keeps messages unconfirmed up to slots' capacity (slots is shared by
// every call on the connection) and up to depth of one key, waits for the
// oldest, and sends a key's next message as its earlier ones are confirmed.
// A call takes a slot without waiting while it holds some (else it waits for
// its own oldest answer first), so calls sharing slots never wait on each
// other for good.
//
// With depth 1 (or less) a key has one message unconfirmed at a time, as
// with Run. With more, a key's messages travel together on the connection;
// if one fails retryably, none of its key is sent after it, and if a later
// one already sent is delivered, the failed one fails terminally with
// ErrOvertaken: no message is ever delivered after a later one of its key.
func Pipeline(ctx context.Context, msgs []*sink.Message, slots chan struct{}, depth int, start Start) []error {
	errs := make([]error, len(msgs))
	groups := group(msgs, errs)
	depth = max(depth, 1)
	next := make([]int, len(groups))    // per group, its next message to send
	open := make([]int, len(groups))    // per group, its messages unconfirmed
	queued := make([]bool, len(groups)) // per group, whether it is in ready
	ready := make([]int, 0, len(groups))
	enqueue := func(g int) {
		if !queued[g] && next[g] < len(groups[g]) && open[g] < depth {
			queued[g] = true
			ready = append(ready, g)
		}
	}
	for g := range groups {
		enqueue(g)
	}
	type sent struct {
		g, i int
		wait func() error
	}
	var unconfirmed []sent
	settle := func(g, i int, err error) {
		errs[i] = err
		if err != nil && !sink.IsTerminal(err) {
			fail(groups[g][next[g]:], errs, fmt.Errorf("%w: %w", ErrHeldBack, err))
			next[g] = len(groups[g])
			return
		}
		enqueue(g)
	}
	for len(ready) > 0 || len(unconfirmed) > 0 {
		if len(ready) > 0 && ctx.Err() == nil && take(ctx, slots, len(unconfirmed) == 0) {
			g := ready[0]
			ready = ready[1:]
			queued[g] = false
			i := groups[g][next[g]]
			next[g]++
			wait, err := start(ctx, i)
			if err != nil {
				<-slots
				settle(g, i, err)
				continue
			}
			open[g]++
			unconfirmed = append(unconfirmed, sent{g, i, wait})
			enqueue(g)
			continue
		}
		if len(unconfirmed) == 0 {
			// The context ended: what is left is not sent.
			for _, g := range ready {
				fail(groups[g][next[g]:], errs, fmt.Errorf("not sent: %w", ctx.Err()))
			}
			break
		}
		s := unconfirmed[0]
		unconfirmed = unconfirmed[1:]
		err := s.wait()
		<-slots
		open[s.g]--
		settle(s.g, s.i, err)
	}
	if depth > 1 {
		overtaken(groups, errs)
	}
	return errs
}

// overtaken makes terminal each retryable failure of a key followed by a
// delivered message of the same key.
func overtaken(groups [][]int, errs []error) {
	for _, g := range groups {
		delivered := false
		for n := len(g) - 1; n >= 0; n-- {
			i := g[n]
			switch {
			case errs[i] == nil:
				delivered = true
			case delivered && !sink.IsTerminal(errs[i]):
				errs[i] = sink.Terminal(fmt.Errorf("%w: %w", errs[i], ErrOvertaken))
			}
		}
	}
}

// take takes a slot: at once if one is free, else, when block is set (the
// call holds none), once one is or ctx ends.
func take(ctx context.Context, slots chan struct{}, block bool) bool {
	select {
	case slots <- struct{}{}:
		return true
	default:
	}
	if !block {
		return false
	}
	select {
	case slots <- struct{}{}:
		return true
	case <-ctx.Done():
		return false
	}
}
