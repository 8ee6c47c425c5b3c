// Package nats publishes relay messages to NATS JetStream with nats.go.
//
// Each message is published to the subject Message.Destination with
// PublishMsgAsync and counts as published only once its PubAck arrives. The
// event id travels as Nats-Msg-Id, so the stream drops a retried copy that
// arrives within its duplicate window; the message key travels as the
// header Outbox-Key (and the partition key, when set, as
// Outbox-Partition-Key), and Message.Headers become message headers with
// their names unchanged.
//
// # Ordering
//
// Messages of one order key (sink.OrderKey) are published one after the
// other: the next is sent only after the previous one's PubAck. Messages of
// different keys, and messages without a key, are in flight together (up to
// max_pending at once, across all calls), so a call with many keys is
// pipelined while a single hot key costs one round trip per message.
//
// Pipelining one key instead (sending its messages back to back and relying
// on the server storing them in order) would break the contract in ways
// that cannot be repaired afterwards: when the connection drops between two
// messages of a key, the earlier one may be lost with the old connection
// while the later one goes out on the new one and is stored; a stream limit
// (discard new) may refuse one message and accept the next once space frees.
// A later message confirmed after an earlier one failed can then only be
// reported by dead-lettering the earlier one. Nats-Expected-Last-Subject-
// Sequence does not help either: it orders a subject, not a key, and needs
// the subject's last sequence known in advance.
//
// The chains are run by package keyorder: once a message of a key fails
// retryably, the rest of that key in the call are not sent and fail as
// retryable (keyorder.ErrHeldBack). A terminal failure does not stop the
// key: that message goes to the dead-letter table and will never be
// published, so its successors may go on.
//
// The connection reconnects by itself. Publishes made while it is down fail
// at once (the reconnect buffer is off, so nothing queued in it can overtake
// a message lost with the old connection), and messages awaiting a PubAck
// when it dropped fail as retryable: they may have been stored, and their
// retry is then dropped as a duplicate if it comes within the stream's
// duplicate window.
//
// # Classification
//
// Terminal: no stream captures the subject (no responders), a stream that
// refuses the message for good (sealed, message or headers above the
// stream's maximum), a message above the server's max_payload, an empty
// subject, and headers NATS cannot carry (a name with ':' or white space, a
// value with CR or LF, or a name reserved for the server, starting with
// "Nats-", or for the key headers above).
//
// The client asks again twice, 250ms apart, before it takes "no responders"
// as final, which rides out a stream that is briefly without a leader.
//
// Retryable: PubAck timeouts, disconnects, a closed connection, a
// cancelled context, stream limits with discard-new, and any other
// JetStream API error (such as JetStream unavailable or resources
// exhausted), which say nothing about the message itself.
//
// # Duplicate window
//
// A stream drops a message whose Nats-Msg-Id it saw within its duplicate
// window (2 minutes by default). The relay may retry a message up to its
// maximum backoff after a failed attempt that was in fact stored, so a
// window shorter than retry_horizon may let a duplicate through. The first
// publish to each subject checks the stream that captures it and logs a
// warning in that case; DuplicateWindow runs the same check on demand.
package nats

import (
	"context"
	"fmt"
	"log/slog"
	"strings"
	"sync"

	natsclient "github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"

	"github.com/outbox-relay/outbox-relay/internal/sink"
)

// defaultMaxPayload is the server's default max_payload, assumed until the
// first connection tells the real value.
const defaultMaxPayload = 1 << 20

// Publisher publishes messages to JetStream. It is safe for concurrent use.
type Publisher struct {
	cfg  Config
	log  *slog.Logger
	conn *natsclient.Conn
	js   jetstream.JetStream
	// slots bounds the messages awaiting a PubAck (max_pending).
	slots chan struct{}

	windows *windowChecks

	closeOnce sync.Once
	closeErr  error
	closed    chan struct{} // closed once the connection is
}

var _ sink.Publisher = (*Publisher)(nil)

// Option customises New.
type Option func(*options)

type options struct {
	logger *slog.Logger
}

// WithLogger sends the publisher's logs (connection changes, duplicate
// window warnings) to l.
func WithLogger(l *slog.Logger) Option {
	return func(o *options) { o.logger = l }
}

// New connects to the servers of cfg (unset fields take their defaults). A
// server that is down does not make New fail: the connection keeps trying
// in the background and Ping reports it.
func New(cfg Config, opts ...Option) (*Publisher, error) {
	o := options{logger: slog.New(slog.DiscardHandler)}
	for _, opt := range opts {
		opt(&o)
	}
	cfg.Defaults()
	if ps := cfg.Problems(); len(ps) > 0 {
		return nil, fmt.Errorf("nats sink: %s: %s", ps[0].Field, ps[0].Msg)
	}
	log := o.logger.With(slog.String("sink_type", "nats"))
	copts, err := cfg.options()
	if err != nil {
		return nil, fmt.Errorf("nats sink: %w", err)
	}
	closed := make(chan struct{})
	copts = append(copts,
		natsclient.DisconnectErrHandler(func(c *natsclient.Conn, err error) {
			if err == nil || c.IsClosed() {
				return // the relay closed it: not news
			}
			log.Warn("nats connection lost", slog.Any("error", err))
		}),
		// Called after every other callback of the connection, once it
		// is closed: Close waits for it, so nothing logs after Close.
		natsclient.ClosedHandler(func(*natsclient.Conn) { close(closed) }),
		natsclient.ReconnectHandler(func(c *natsclient.Conn) {
			log.Info("nats connection restored", slog.String("server", c.ConnectedUrlRedacted()))
		}),
		natsclient.ConnectHandler(func(c *natsclient.Conn) {
			log.Info("nats connected", slog.String("server", c.ConnectedUrlRedacted()))
		}),
	)
	conn, err := natsclient.Connect(strings.Join(cfg.serverList(), ","), copts...)
	if err != nil {
		return nil, fmt.Errorf("nats sink: connect: %w", err)
	}
	js, err := jetstream.New(conn,
		jetstream.WithPublishAsyncTimeout(cfg.AckTimeout.D()),
		// Publish bounds what is in flight itself (slots); this only
		// leaves room for futures abandoned by a cancelled call, which
		// stay pending until their ack timeout.
		jetstream.WithPublishAsyncMaxPending(4*cfg.MaxPending),
	)
	if err != nil {
		conn.Close()
		return nil, fmt.Errorf("nats sink: jetstream: %w", err)
	}
	p := &Publisher{
		cfg:    cfg,
		log:    log,
		conn:   conn,
		closed: closed,
		js:     js,
		slots:  make(chan struct{}, cfg.MaxPending),
	}
	p.windows = newWindowChecks(p)
	return p, nil
}

// MaxMessageBytes is the server's max_payload (1 MiB until the first
// connection). Headers count against it too, so a payload just under it
// may still be refused (terminally).
func (p *Publisher) MaxMessageBytes() int {
	if n := p.conn.MaxPayload(); n > 0 {
		return int(n)
	}
	return defaultMaxPayload
}

// Ping reports whether the server answers and JetStream is enabled for the
// account.
func (p *Publisher) Ping(ctx context.Context) error {
	if !p.conn.IsConnected() {
		return fmt.Errorf("nats: not connected (status %s)", p.conn.Status())
	}
	if _, err := p.js.AccountInfo(ctx); err != nil {
		return fmt.Errorf("nats: jetstream account info: %w", err)
	}
	return nil
}

// Close waits for the publishes in flight until ctx is done, then closes
// the connection. Publish calls made after Close fail as retryable.
func (p *Publisher) Close(ctx context.Context) error {
	p.closeOnce.Do(func() {
		p.windows.stop()
		select {
		case <-p.js.PublishAsyncComplete():
		case <-ctx.Done():
			p.closeErr = fmt.Errorf("nats: close before every PubAck arrived: %w", ctx.Err())
		}
		p.conn.Close()
		select {
		case <-p.closed:
		case <-ctx.Done():
		}
	})
	return p.closeErr
}
