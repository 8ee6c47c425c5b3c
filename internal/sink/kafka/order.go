package kafka

import (
	"context"
	"fmt"
	"sync"

	"github.com/outbox-relay/outbox-relay/internal/sink"
)

// order settles what the client could not prevent: a message sent after an
// earlier message of its key had already failed (see the package
// documentation).
//
//   - A failed message that a later message of its key overtook cannot be
//     retried without breaking the key's order: it becomes terminal.
//   - After a retryable failure, later messages of the key that failed with
//     a record error are held back (retryable) rather than sent alone again.
func order(out []outcome) {
	overtaken := make(map[string]bool)
	for i := len(out) - 1; i >= 0; i-- {
		o := &out[i]
		if o.key == "" {
			continue
		}
		switch {
		case o.state == stateOK:
			overtaken[o.key] = true
		case o.state == stateFailed && overtaken[o.key]:
			if classify(o.err) == retryable {
				o.err = sink.Terminal(fmt.Errorf("produce to topic %q: a later message with the same key was delivered: %w", o.topic, o.err))
			} else {
				o.err = result(o.topic, o.err)
			}
			o.state = stateFinal
		}
	}
	failed := make(map[string]bool)
	for i := range out {
		o := &out[i]
		if o.key == "" || o.state != stateFailed {
			continue
		}
		switch classify(o.err) {
		case retryable:
			failed[o.key] = true
		case badRecord:
			if failed[o.key] {
				o.state, o.err = stateFinal, fmt.Errorf("produce to topic %q: %w", o.topic, errHeld)
			}
		}
	}
}

type topicPartition struct {
	topic string
	part  int32
}

// isolate sends each message that failed with a record error once more on
// its own, one at a time per partition in call order. franz-go fails every
// record buffered for a partition with the error of the one rejected batch,
// so only a message rejected alone is known to be bad.
func (c *call) isolate(ctx context.Context) {
	groups := make(map[topicPartition][]int)
	for i, o := range c.out {
		if o.state == stateFailed && o.part >= 0 && classify(o.err) == badRecord {
			tp := topicPartition{o.topic, o.part}
			groups[tp] = append(groups[tp], i)
		}
	}
	var wg sync.WaitGroup
	for _, idx := range groups {
		wg.Go(func() { c.resend(ctx, idx) })
	}
	wg.Wait()
}

// resend sends the messages at idx one by one and holds back the rest after
// a retryable failure.
func (c *call) resend(ctx context.Context, idx []int) {
	held := false
	for _, i := range idx {
		o := &c.out[i]
		if held {
			o.state, o.err = stateFinal, fmt.Errorf("produce to topic %q: %w", o.topic, errHeld)
			continue
		}
		err := c.p.produceOne(ctx, c.msgs[i])
		if err == nil {
			o.state, o.err = stateOK, nil
			continue
		}
		o.state, o.err = stateFailed, err
		held = classify(err) == retryable
	}
}
