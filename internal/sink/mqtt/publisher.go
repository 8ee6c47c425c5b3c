package mqtt

import (
	"context"
	"crypto/tls"
	"errors"
	"fmt"
	"log/slog"
	"net"
	"sync"

	"github.com/outbox-relay/outbox-relay/internal/sink"
	"github.com/outbox-relay/outbox-relay/internal/sink/keyorder"
)

// Publisher publishes messages to an MQTT v5 server. It is safe for
// concurrent use.
type Publisher struct {
	cfg    Config
	addr   string
	tls    *tls.Config
	logger *slog.Logger

	dialing chan struct{} // one connection attempt at a time

	mu     sync.Mutex
	cur    *session
	closed bool
}

var _ sink.Publisher = (*Publisher)(nil)

// Option customises New.
type Option func(*Publisher)

// WithLogger logs connection events to l.
func WithLogger(l *slog.Logger) Option {
	return func(p *Publisher) { p.logger = l }
}

// New returns a Publisher for cfg (defaults applied). It does not connect:
// the first Publish or Ping does.
func New(cfg Config, opts ...Option) (*Publisher, error) {
	cfg.Defaults()
	if ps := cfg.Problems(); len(ps) > 0 {
		return nil, fmt.Errorf("mqtt: %s: %s", ps[0].Field, ps[0].Msg)
	}
	addr, useTLS, err := parseURL(cfg.URL)
	if err != nil {
		return nil, fmt.Errorf("mqtt: url: %w", err)
	}
	p := &Publisher{
		cfg:     cfg,
		addr:    addr,
		logger:  slog.New(slog.DiscardHandler),
		dialing: make(chan struct{}, 1),
	}
	if useTLS || cfg.TLS.Enabled {
		host, _, _ := net.SplitHostPort(addr)
		if p.tls, err = cfg.TLS.Load(host); err != nil {
			return nil, fmt.Errorf("mqtt: %w", err)
		}
	}
	for _, o := range opts {
		o(p)
	}
	return p, nil
}

// MaxMessageBytes is the largest payload Publish sends.
func (p *Publisher) MaxMessageBytes() int { return p.cfg.MaxMessageBytes }

// Publish publishes msgs with QoS 1 and waits for their PUBACKs; see the
// package documentation for order and classification.
func (p *Publisher) Publish(ctx context.Context, msgs []*sink.Message) []error {
	return keyorder.Run(ctx, msgs, p.cfg.MaxInFlight, func(ctx context.Context, i int) error {
		return p.publishOne(ctx, msgs[i])
	})
}

func (p *Publisher) publishOne(ctx context.Context, m *sink.Message) error {
	if len(m.Payload) > p.cfg.MaxMessageBytes {
		return sink.Terminal(fmt.Errorf("payload of %d bytes: %w (max_message_bytes %d)",
			len(m.Payload), ErrTooLarge, p.cfg.MaxMessageBytes))
	}
	pb, size, err := publishPacket(m)
	if err != nil {
		return err
	}
	s, err := p.session(ctx)
	if err != nil {
		return err
	}
	if s.maxPacket > 0 && size > s.maxPacket {
		return sink.Terminal(fmt.Errorf("packet of about %d bytes: %w (the server's maximum packet size is %d)",
			size, ErrTooLarge, s.maxPacket))
	}
	return s.publish(ctx, pb, p.cfg.PublishTimeout)
}

// session returns the live connection, making one when there is none.
func (p *Publisher) session(ctx context.Context) (*session, error) {
	if s, err := p.current(); s != nil || err != nil {
		return s, err
	}
	select {
	case p.dialing <- struct{}{}:
		defer func() { <-p.dialing }()
	case <-ctx.Done():
		return nil, fmt.Errorf("connect: %w", ctx.Err())
	}
	if s, err := p.current(); s != nil || err != nil {
		return s, err
	}
	s, err := connect(ctx, &p.cfg, p.addr, p.tls)
	if err != nil {
		p.logger.WarnContext(ctx, "mqtt connect failed", "addr", p.addr, "err", err)
		if ctx.Err() == nil {
			err = sink.Down(err) // no message was sent: the server is not there, or refuses the relay
		}
		return nil, err
	}
	p.mu.Lock()
	if p.closed {
		p.mu.Unlock()
		s.close()
		return nil, ErrClosed
	}
	p.cur = s
	p.mu.Unlock()
	p.logger.InfoContext(ctx, "mqtt connected", "addr", p.addr, "client_id", p.cfg.ClientID)
	context.AfterFunc(s.ctx, func() {
		defer close(s.ended)
		if cause := context.Cause(s.ctx); !errors.Is(cause, ErrClosed) {
			p.logger.Warn("mqtt connection lost", "addr", p.addr, "err", cause)
		}
	})
	return s, nil
}

func (p *Publisher) current() (*session, error) {
	p.mu.Lock()
	defer p.mu.Unlock()
	if p.closed {
		return nil, ErrClosed
	}
	if p.cur != nil && p.cur.alive() {
		return p.cur, nil
	}
	return nil, nil
}

// Ping connects if there is no live connection.
func (p *Publisher) Ping(ctx context.Context) error {
	_, err := p.session(ctx)
	return err
}

// Close disconnects; messages in flight fail retryably, and so does
// Publish afterwards.
func (p *Publisher) Close(ctx context.Context) error {
	p.mu.Lock()
	s := p.cur
	p.closed, p.cur = true, nil
	p.mu.Unlock()
	if s != nil {
		s.close()
		select {
		case <-s.ended: // nothing logs about the session after Close
		case <-ctx.Done():
		}
	}
	return nil
}
