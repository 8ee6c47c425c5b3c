package rabbitmq

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"sync"
	"time"

	amqp "github.com/rabbitmq/amqp091-go"

	"github.com/outbox-relay/outbox-relay/internal/sink"
	"github.com/outbox-relay/outbox-relay/internal/sink/keyorder"
)

// Publisher publishes messages to RabbitMQ. It is safe for concurrent use.
type Publisher struct {
	cfg    Config
	uri    string
	amqp   amqp.Config
	logger *slog.Logger

	dialing chan struct{} // one dial at a time

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
		return nil, fmt.Errorf("rabbitmq: %s: %s", ps[0].Field, ps[0].Msg)
	}
	uri, err := amqp.ParseURI(cfg.URL)
	if err != nil {
		return nil, fmt.Errorf("rabbitmq: url: %w", err)
	}
	ac := amqp.Config{
		Heartbeat:  10 * time.Second,
		Locale:     "en_US",
		Properties: amqp.NewConnectionProperties(),
	}
	ac.Properties.SetClientConnectionName(appID)
	if cfg.TLS.Enabled || uri.Scheme == "amqps" {
		uri.Scheme = "amqps"
		tc, err := cfg.TLS.Load(uri.Host)
		if err != nil {
			return nil, fmt.Errorf("rabbitmq: %w", err)
		}
		ac.TLSClientConfig = tc
	}
	p := &Publisher{
		cfg:     cfg,
		uri:     uri.String(),
		amqp:    ac,
		logger:  slog.New(slog.DiscardHandler),
		dialing: make(chan struct{}, 1),
	}
	for _, o := range opts {
		o(p)
	}
	return p, nil
}

// MaxMessageBytes is the largest payload Publish sends.
func (p *Publisher) MaxMessageBytes() int { return p.cfg.MaxMessageBytes }

// Publish publishes msgs and waits for their confirms; see the package
// documentation for order and classification. The first message of every
// key goes at once, a key's next one once the previous one is confirmed, at
// most max_in_flight unconfirmed.
func (p *Publisher) Publish(ctx context.Context, msgs []*sink.Message) []error {
	now := time.Now()
	return keyorder.Pipeline(ctx, msgs, make(chan struct{}, max(p.cfg.MaxInFlight, 1)), p.cfg.MaxInFlightPerKey, func(ctx context.Context, i int) (func() error, error) {
		return p.start(ctx, msgs[i], now)
	})
}

// start publishes m and returns how to wait for its confirm, which is
// given up on confirm_timeout after the publish.
func (p *Publisher) start(ctx context.Context, m *sink.Message, now time.Time) (func() error, error) {
	exchange, key, err := p.cfg.route(m.Destination)
	if err != nil {
		return nil, sink.Terminal(err)
	}
	if len(m.Payload) > p.cfg.MaxMessageBytes {
		return nil, sink.Terminal(fmt.Errorf("payload of %d bytes: %w (max_message_bytes %d)",
			len(m.Payload), ErrTooLarge, p.cfg.MaxMessageBytes))
	}
	s, err := p.session(ctx)
	if err != nil {
		return nil, err
	}
	ok, err := s.exchangeExists(exchange)
	if err != nil {
		return nil, err
	}
	if !ok {
		return nil, sink.Terminal(fmt.Errorf("exchange %q: %w", exchange, ErrNoExchange))
	}
	pend, err := s.publish(ctx, exchange, key, *p.cfg.Mandatory, publishing(m, now))
	if err != nil {
		return nil, fmt.Errorf("publish to exchange %q routing key %q: %w", exchange, key, err)
	}
	deadline := time.Now().Add(p.cfg.ConfirmTimeout)
	return func() error {
		timer := time.NewTimer(time.Until(deadline))
		defer timer.Stop()
		select {
		case err := <-pend.result:
			if err != nil && !sink.IsTerminal(err) {
				err = fmt.Errorf("publish to exchange %q routing key %q: %w", exchange, key, err)
			}
			return err
		case <-ctx.Done():
			return fmt.Errorf("wait for confirm: %w", ctx.Err())
		case <-timer.C:
			return fmt.Errorf("%w (%v)", ErrConfirmTimeout, p.cfg.ConfirmTimeout)
		}
	}, nil
}

// session returns the open session, dialing one when there is none.
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
	s, err := dial(ctx, p.uri, p.amqp, p.cfg.ConnectTimeout)
	if err != nil {
		p.logger.WarnContext(ctx, "rabbitmq connect failed", "err", err)
		err = fmt.Errorf("connect: %w", err)
		if ctx.Err() == nil {
			err = sink.Down(err) // no message was sent: the broker is not there
		}
		return nil, err
	}
	p.mu.Lock()
	if p.closed {
		p.mu.Unlock()
		s.end(ErrClosed)
		return nil, ErrClosed
	}
	p.cur = s
	p.mu.Unlock()
	p.logger.InfoContext(ctx, "rabbitmq connected")
	go func() {
		<-s.done
		if !errors.Is(s.err, ErrClosed) {
			p.logger.Warn("rabbitmq channel closed", "err", s.err)
		}
	}()
	return s, nil
}

// current returns the open session, if any, or ErrClosed.
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

// Ping connects if needed and, when an exchange is configured, checks that
// it exists.
func (p *Publisher) Ping(ctx context.Context) error {
	s, err := p.session(ctx)
	if err != nil {
		return err
	}
	if p.cfg.Exchange == "" {
		return nil
	}
	ok, err := s.exchangeExists(p.cfg.Exchange)
	if err != nil {
		return err
	}
	if !ok {
		return fmt.Errorf("exchange %q: %w", p.cfg.Exchange, ErrNoExchange)
	}
	return nil
}

// Close closes the connection; unconfirmed messages fail with ErrClosed.
// Publish fails with ErrClosed afterwards.
func (p *Publisher) Close(context.Context) error {
	p.mu.Lock()
	s := p.cur
	p.closed, p.cur = true, nil
	p.mu.Unlock()
	if s == nil {
		return nil
	}
	s.end(ErrClosed)
	return nil
}
