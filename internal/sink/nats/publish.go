package nats

import (
	"context"
	"errors"
	"fmt"
	"sync"

	natsclient "github.com/nats-io/nats.go"

	"github.com/outbox-relay/outbox-relay/internal/sink"
)

// errHeld answers a message that was not sent because an earlier message of
// its key failed in the same call. It is retryable.
var errHeld = errors.New("not sent: an earlier message with the same key failed")

// Publish publishes msgs and waits for each PubAck; see the package
// documentation for ordering and classification. It returns one result per
// message.
func (p *Publisher) Publish(ctx context.Context, msgs []*sink.Message) []error {
	errs := make([]error, len(msgs))
	// Each chain is published in order, one message at a time; chains
	// run concurrently. A message without a key is a chain of its own.
	var chains [][]int
	byKey := make(map[string]int)
	for i, m := range msgs {
		if m == nil {
			errs[i] = sink.Terminal(errors.New("nil message"))
			continue
		}
		k := sink.OrderKey(m)
		if k == "" {
			chains = append(chains, []int{i})
			continue
		}
		c, ok := byKey[k]
		if !ok {
			c = len(chains)
			byKey[k] = c
			chains = append(chains, nil)
		}
		chains[c] = append(chains[c], i)
	}
	var wg sync.WaitGroup
	for _, idx := range chains {
		wg.Go(func() { p.chain(ctx, msgs, idx, errs) })
	}
	wg.Wait()
	return errs
}

// chain publishes the messages at idx one after the other, each after the
// previous one's PubAck, and stops at the first failure.
func (p *Publisher) chain(ctx context.Context, msgs []*sink.Message, idx []int, errs []error) {
	var failed error
	deadSubjects := map[string]error{}
	for _, i := range idx {
		m := msgs[i]
		if failed != nil {
			if err, ok := deadSubjects[m.Destination]; ok {
				errs[i] = err
			} else {
				errs[i] = fmt.Errorf("publish to subject %q: %w", m.Destination, errHeld)
			}
			continue
		}
		err := p.publishOne(ctx, m)
		errs[i] = err
		if err != nil {
			failed = err
			if classify(err) == badSubject {
				deadSubjects[m.Destination] = err
			}
		}
	}
}

// publishOne publishes m and waits for its PubAck.
func (p *Publisher) publishOne(ctx context.Context, m *sink.Message) error {
	msg, err := natsMsg(m)
	if err != nil {
		return err
	}
	if max := p.MaxMessageBytes(); len(m.Payload) > max {
		return sink.Terminal(fmt.Errorf("publish to subject %q: payload of %d bytes exceeds max_payload %d: %w",
			m.Destination, len(m.Payload), max, natsclient.ErrMaxPayload))
	}
	p.windows.check(m.Destination)
	select {
	case p.slots <- struct{}{}:
	case <-ctx.Done():
		return fmt.Errorf("publish to subject %q: %w", m.Destination, ctx.Err())
	}
	defer func() { <-p.slots }()
	if err := ctx.Err(); err != nil {
		return fmt.Errorf("publish to subject %q: %w", m.Destination, err)
	}
	f, err := p.js.PublishMsgAsync(msg)
	if err != nil {
		return result(m.Destination, err)
	}
	select {
	case <-f.Ok():
		// A duplicate ack means the stream already holds the message.
		return nil
	case err := <-f.Err():
		return result(m.Destination, err)
	case <-ctx.Done():
		return fmt.Errorf("publish to subject %q: %w", m.Destination, ctx.Err())
	}
}
