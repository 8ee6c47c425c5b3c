package redis

import (
	"context"
	"errors"
	"fmt"

	goredis "github.com/redis/go-redis/v9"

	"github.com/outbox-relay/outbox-relay/internal/sink"
)

// errOvertaken wraps the retryable failure of a message whose key had a
// later message stored in the same pipeline.
var errOvertaken = errors.New("a later message with the same key was stored")

// Publish adds msgs to their streams in one pipeline and returns one result
// per message; see the package documentation for ordering and
// classification.
func (p *Publisher) Publish(ctx context.Context, msgs []*sink.Message) []error {
	errs := make([]error, len(msgs))
	cmds := make([]*goredis.StringCmd, len(msgs))
	pipe := p.client.Pipeline()
	sent := 0
	for i, m := range msgs {
		if m == nil {
			errs[i] = sink.Terminal(errors.New("nil message"))
			continue
		}
		// A refused message is dead-lettered: its key goes on.
		if err := p.check(m); err != nil {
			errs[i] = err
			continue
		}
		cmds[i] = pipe.XAdd(ctx, &goredis.XAddArgs{
			Stream: m.Destination,
			MaxLen: p.cfg.MaxLen,
			Approx: p.cfg.MaxLen > 0,
			ID:     "*",
			Values: fields(m),
		})
		sent++
	}
	if sent == 0 {
		return errs
	}
	if err := p.exec(ctx, pipe); err != nil {
		for i, cmd := range cmds {
			if cmd != nil {
				errs[i] = fmt.Errorf("xadd to stream %q: %w", msgs[i].Destination, err)
			}
		}
		return errs
	}
	for i, cmd := range cmds {
		if cmd != nil {
			errs[i] = result(msgs[i].Destination, cmd.Err())
		}
	}
	overtaken(msgs, cmds, errs)
	return errs
}

// exec runs the pipeline. If ctx ends first it returns ctx's error and the
// pipeline finishes in the background (its results unread: none of its
// messages is reported stored).
func (p *Publisher) exec(ctx context.Context, pipe goredis.Pipeliner) error {
	if err := ctx.Err(); err != nil {
		return err
	}
	done := make(chan struct{})
	p.inflight.Add(1)
	go func() {
		defer p.inflight.Done()
		defer close(done)
		// Per-command errors are read from the commands.
		_, _ = pipe.Exec(ctx)
	}()
	select {
	case <-done:
		return nil
	case <-ctx.Done():
		return ctx.Err()
	}
}

func (p *Publisher) check(m *sink.Message) error {
	switch {
	case m.Destination == "":
		return sink.Terminal(fmt.Errorf("message %q: no destination stream", m.ID))
	case len(m.Payload) > p.cfg.MaxMessageBytes:
		return sink.Terminal(fmt.Errorf("xadd to stream %q: payload of %d bytes exceeds max_message_bytes %d",
			m.Destination, len(m.Payload), p.cfg.MaxMessageBytes))
	}
	return nil
}

// overtaken makes terminal each retryable failure followed by a stored
// message of the same key: retrying it would store it after its successor.
func overtaken(msgs []*sink.Message, cmds []*goredis.StringCmd, errs []error) {
	stored := make(map[string]bool)
	for i := len(msgs) - 1; i >= 0; i-- {
		if cmds[i] == nil {
			continue
		}
		k := sink.OrderKey(msgs[i])
		if k == "" {
			continue
		}
		switch {
		case errs[i] == nil:
			stored[k] = true
		case stored[k] && !sink.IsTerminal(errs[i]):
			errs[i] = sink.Terminal(fmt.Errorf("%w: %w", errs[i], errOvertaken))
		}
	}
}
