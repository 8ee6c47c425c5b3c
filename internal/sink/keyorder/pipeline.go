package keyorder

import (
	"context"
	"fmt"

	"github.com/outbox-relay/outbox-relay/internal/sink"
)

// Start sends msgs[i] and returns how to wait for the broker's answer to
// it; an error means the message was not sent.
type Start func(ctx context.Context, i int) (wait func() error, err error)

// Pipeline is Run for a broker whose client sends a message at once and
// tells its answer later: one goroutine sends the first message of every
// key, keeps messages unconfirmed up to slots' capacity (slots is shared by
// every call on the connection), waits for the oldest, and sends a key's
// next message once the previous one was confirmed: at most one message of
// a key unconfirmed, as Run, without a goroutine a key. A call takes a slot
// without waiting while it holds some (else it waits for its own oldest
// answer first), so calls sharing slots never wait on each other for good.
func Pipeline(ctx context.Context, msgs []*sink.Message, slots chan struct{}, start Start) []error {
	errs := make([]error, len(msgs))
	groups := group(msgs, errs)
	next := make([]int, len(groups)) // per group, its next message to send
	ready := make([]int, len(groups))
	for g := range ready {
		ready[g] = g
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
		if next[g] < len(groups[g]) {
			ready = append(ready, g)
		}
	}
	for len(ready) > 0 || len(unconfirmed) > 0 {
		if len(ready) > 0 && ctx.Err() == nil && take(ctx, slots, len(unconfirmed) == 0) {
			g := ready[0]
			ready = ready[1:]
			i := groups[g][next[g]]
			next[g]++
			wait, err := start(ctx, i)
			if err != nil {
				<-slots
				settle(g, i, err)
				continue
			}
			unconfirmed = append(unconfirmed, sent{g, i, wait})
			continue
		}
		if len(unconfirmed) == 0 {
			// The context ended: what is left is not sent.
			for _, g := range ready {
				fail(groups[g][next[g]:], errs, fmt.Errorf("not sent: %w", ctx.Err()))
			}
			return errs
		}
		s := unconfirmed[0]
		unconfirmed = unconfirmed[1:]
		err := s.wait()
		<-slots
		settle(s.g, s.i, err)
	}
	return errs
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
