// Package redis publishes relay messages to Redis Streams with go-redis.
//
// Each message becomes one entry, added with XADD (id "*", and MAXLEN ~
// max_len when set) to the stream named by Message.Destination. The entry's
// fields are, in order: id (the event id), key and partition_key (when the
// message has them), one field per header named h:<header name>, and
// payload. A message counts as published once XADD returned its entry id.
//
// # Ordering
//
// One Publish call sends all its XADDs in one pipeline: one connection, one
// round trip. Redis runs a connection's commands in order, so the messages
// of a key are stored in the order given. The client does not retry a
// pipeline (a retry after a partial write would store its first messages
// again); the relay does.
//
// A pipeline cannot stop at a failure: Redis runs every command it
// received. So a message of a key may fail while a later message of the
// same key is stored. The cases are:
//
//   - The connection breaks: every command whose reply did not arrive fails
//     (retryable). Replies come in order, so no later message is reported
//     stored after an earlier one failed.
//   - A terminal error (WRONGTYPE: the destination holds another type) fails
//     only that message; it goes to the dead-letter table and later messages
//     of its key may be stored.
//   - A retryable error on one command while a later command of the key
//     succeeds (for example OOM that clears in between) cannot be retried
//     without storing it after its successor. Such a message is reported
//     terminal ("overtaken"), so it is dead-lettered rather than reordered.
//
// A message refused before sending (no destination, payload too large) is
// terminal; the rest of its key is sent, as after any terminal failure.
//
// Redis has no deduplication: a message whose reply was lost (a connection
// cut after the write) may be stored twice when the relay retries it.
// Consumers deduplicate by the id field.
//
// # Classification
//
// Terminal: WRONGTYPE, an empty destination, and a payload above
// max_message_bytes. Retryable: connection errors and timeouts, a
// cancelled context, and every other Redis error (OOM, READONLY, LOADING,
// BUSY, NOPERM, MASTERDOWN...), which depend on the server's state rather
// than the message.
package redis

import (
	"context"
	"fmt"
	"log/slog"
	"sync"

	goredis "github.com/redis/go-redis/v9"

	"github.com/outbox-relay/outbox-relay/internal/sink"
)

// Publisher publishes messages to Redis Streams. It is safe for concurrent
// use.
type Publisher struct {
	cfg    Config
	log    *slog.Logger
	client *goredis.Client
	// inflight counts pipelines still running after their call gave up.
	inflight sync.WaitGroup

	closeOnce sync.Once
	closeErr  error
}

var _ sink.Publisher = (*Publisher)(nil)

// Option customises New.
type Option func(*options)

type options struct {
	logger *slog.Logger
}

// WithLogger sends the publisher's logs to l.
func WithLogger(l *slog.Logger) Option {
	return func(o *options) { o.logger = l }
}

// New creates a Publisher for cfg (unset fields take their defaults). It
// does not connect: use Ping to check that the server answers.
func New(cfg Config, opts ...Option) (*Publisher, error) {
	o := options{logger: slog.New(slog.DiscardHandler)}
	for _, opt := range opts {
		opt(&o)
	}
	cfg.Defaults()
	if ps := cfg.Problems(); len(ps) > 0 {
		return nil, fmt.Errorf("redis sink: %s: %s", ps[0].Field, ps[0].Msg)
	}
	ro, err := cfg.options()
	if err != nil {
		return nil, fmt.Errorf("redis sink: %w", err)
	}
	return &Publisher{
		cfg:    cfg,
		log:    o.logger.With(slog.String("sink_type", "redis")),
		client: goredis.NewClient(ro),
	}, nil
}

// MaxMessageBytes is the largest payload Publish sends (max_message_bytes).
func (p *Publisher) MaxMessageBytes() int { return p.cfg.MaxMessageBytes }

// Ping reports whether the server answers.
func (p *Publisher) Ping(ctx context.Context) error {
	if err := p.client.Ping(ctx).Err(); err != nil {
		return fmt.Errorf("redis: ping: %w", err)
	}
	return nil
}

// Close waits until ctx is done for pipelines that outlived their call,
// then closes the connections.
func (p *Publisher) Close(ctx context.Context) error {
	p.closeOnce.Do(func() {
		done := make(chan struct{})
		go func() { p.inflight.Wait(); close(done) }()
		select {
		case <-done:
		case <-ctx.Done():
			p.closeErr = fmt.Errorf("redis: close with pipelines still running: %w", ctx.Err())
		}
		if err := p.client.Close(); err != nil && p.closeErr == nil {
			p.closeErr = fmt.Errorf("redis: close: %w", err)
		}
	})
	return p.closeErr
}
