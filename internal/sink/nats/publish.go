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
// message.
func (p *Publisher) Publish(ctx context.Context, msgs []*sink.Message) []error {
	return keyorder.Run(ctx, msgs, p.cfg.MaxPending, func(ctx context.Context, i int) error {
		return p.publishOne(ctx, msgs[i])
	})
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
	// slots bounds what awaits a PubAck across concurrent calls.
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
