package nats

import (
	"context"
	"fmt"

	natsclient "github.com/nats-io/nats.go"

	"github.com/outbox-relay/outbox-relay/internal/sink"
	"github.com/outbox-relay/outbox-relay/internal/sink/keyorder"
)

// Publish publishes msgs and waits for each PubAck; see the package
// documentation for ordering and classification. It returns one result per
// message. The first message of every key goes at once (asynchronous
// publishes, at most max_pending awaiting their PubAck across calls), a
// key's next one once the previous one is acknowledged (or, with
// max_pending_per_key, once fewer of its key await theirs).
func (p *Publisher) Publish(ctx context.Context, msgs []*sink.Message) []error {
	return keyorder.Pipeline(ctx, msgs, p.slots, p.cfg.MaxPendingPerKey, func(ctx context.Context, i int) (func() error, error) {
		return p.start(ctx, msgs[i])
	})
}

// start publishes m and returns how to wait for its PubAck.
func (p *Publisher) start(ctx context.Context, m *sink.Message) (func() error, error) {
	msg, err := natsMsg(m)
	if err != nil {
		return nil, err
	}
	if max := p.MaxMessageBytes(); len(m.Payload) > max {
		return nil, sink.Terminal(fmt.Errorf("publish to subject %q: payload of %d bytes exceeds max_payload %d: %w",
			m.Destination, len(m.Payload), max, natsclient.ErrMaxPayload))
	}
	p.windows.check(m.Destination)
	f, err := p.js.PublishMsgAsync(msg)
	if err != nil {
		return nil, result(m.Destination, err)
	}
	return func() error {
		select {
		case <-f.Ok():
			// A duplicate ack means the stream already holds the message.
			return nil
		case err := <-f.Err():
			return result(m.Destination, err)
		case <-ctx.Done():
			return fmt.Errorf("publish to subject %q: %w", m.Destination, ctx.Err())
		}
	}, nil
}
