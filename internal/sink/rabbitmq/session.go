package rabbitmq

import (
	"context"
	"errors"
	"fmt"
	"maps"
	"net"
	"sync"
	"time"

	amqp "github.com/rabbitmq/amqp091-go"

	"github.com/outbox-relay/outbox-relay/internal/sink"
)

// errChannelClosed is wrapped by the error of a message whose channel
// closed before its confirm came.
var errChannelClosed = errors.New("channel closed before the confirm")

// session is one connection with one channel in confirm mode. It tracks the
// unconfirmed publishes by delivery tag; one goroutine reads the confirms
// and returns of the channel and settles them.
type session struct {
	conn *amqp.Connection
	ch   *amqp.Channel

	// publishMu makes taking the next delivery tag and publishing one step.
	publishMu sync.Mutex

	mu      sync.Mutex
	pending map[uint64]*pending
	err     error         // why the session ended; set once
	done    chan struct{} // closed when the session ended

	checkMu   sync.Mutex
	exchanges map[string]exchangeState
}

// pending is one unconfirmed publish.
type pending struct {
	exchange, key, id string
	returned          *amqp.Return
	result            chan error // receives the outcome once
}

type exchangeState struct {
	exists  bool
	checked time.Time
}

// dial opens a connection and a confirm channel.
func dial(ctx context.Context, uri string, cfg amqp.Config, timeout time.Duration) (*session, error) {
	cfg.Properties = maps.Clone(cfg.Properties) // the client writes to it
	cfg.Dial = func(network, addr string) (net.Conn, error) {
		d := net.Dialer{Timeout: timeout}
		conn, err := d.DialContext(ctx, network, addr)
		if err != nil {
			return nil, err
		}
		// Bounds the TLS and AMQP handshakes; cleared once open.
		deadline := time.Now().Add(timeout)
		if d, ok := ctx.Deadline(); ok && d.Before(deadline) {
			deadline = d
		}
		if err := conn.SetDeadline(deadline); err != nil {
			_ = conn.Close()
			return nil, err
		}
		return conn, nil
	}
	conn, err := amqp.DialConfig(uri, cfg)
	if err != nil {
		return nil, fmt.Errorf("dial: %w", err)
	}
	ch, err := conn.Channel()
	if err != nil {
		_ = conn.Close()
		return nil, fmt.Errorf("open channel: %w", err)
	}
	if err := ch.Confirm(false); err != nil {
		_ = conn.Close()
		return nil, fmt.Errorf("confirm mode: %w", err)
	}
	s := &session{
		conn:      conn,
		ch:        ch,
		pending:   map[uint64]*pending{},
		done:      make(chan struct{}),
		exchanges: map[string]exchangeState{},
	}
	closes := ch.NotifyClose(make(chan *amqp.Error, 1))
	returns := ch.NotifyReturn(make(chan amqp.Return, 256))
	confirms := ch.NotifyPublish(make(chan amqp.Confirmation, 1024))
	go s.settle(confirms, returns, closes)
	return s, nil
}

// settle reads the channel's confirms and returns until it closes. The
// broker sends a mandatory message's basic.return before its basic.ack, and
// the client hands both over from one goroutine in that order, so the
// returns buffered when a confirm arrives include the one for it.
func (s *session) settle(confirms <-chan amqp.Confirmation, returns <-chan amqp.Return, closes <-chan *amqp.Error) {
	for confirms != nil {
		select {
		case r, ok := <-returns:
			if !ok {
				returns = nil
				continue
			}
			s.onReturn(r)
		case c, ok := <-confirms:
			if !ok {
				confirms = nil
				continue
			}
			returns = s.drainReturns(returns)
			s.onConfirm(c)
		}
	}
	var e *amqp.Error
	if c, ok := <-closes; ok {
		e = c
	}
	s.end(closeError(e))
}

// closeError is the error of the messages a channel left unconfirmed when
// it closed with e (nil: closed by us). A connection-level error (lost,
// forced closed, heartbeats missed) is the broker's failure (sink.Down); a
// channel exception, which a message may have caused, is not.
func closeError(e *amqp.Error) error {
	if e == nil {
		return errChannelClosed
	}
	err := fmt.Errorf("%w: %w", errChannelClosed, e)
	if !e.Recover {
		return sink.Down(err)
	}
	return err
}

func (s *session) drainReturns(returns <-chan amqp.Return) <-chan amqp.Return {
	for returns != nil {
		select {
		case r, ok := <-returns:
			if !ok {
				return nil
			}
			s.onReturn(r)
		default:
			return returns
		}
	}
	return nil
}

// onReturn marks the returned message: the earliest unconfirmed publish with
// its id, exchange and routing key (returns come in publish order).
func (s *session) onReturn(r amqp.Return) {
	s.mu.Lock()
	defer s.mu.Unlock()
	var best uint64
	for tag, p := range s.pending {
		if p.returned == nil && p.id == r.MessageId && p.exchange == r.Exchange && p.key == r.RoutingKey &&
			(best == 0 || tag < best) {
			best = tag
		}
	}
	if best != 0 {
		s.pending[best].returned = &r
	}
}

func (s *session) onConfirm(c amqp.Confirmation) {
	s.mu.Lock()
	p := s.pending[c.DeliveryTag]
	delete(s.pending, c.DeliveryTag)
	s.mu.Unlock()
	if p == nil {
		return
	}
	switch {
	case !c.Ack:
		p.result <- fmt.Errorf("%w by the broker", ErrNacked)
	case p.returned != nil:
		p.result <- unroutable(p.exchange, p.key, p.returned)
	default:
		p.result <- nil
	}
}

// end fails every unconfirmed publish with err and closes the connection.
func (s *session) end(err error) {
	s.mu.Lock()
	if s.err != nil {
		s.mu.Unlock()
		return
	}
	s.err = err
	// Dead before any waiter hears of it: a caller that reacts to a failure
	// at once must not be handed this session again.
	close(s.done)
	for tag, p := range s.pending {
		p.result <- err
		delete(s.pending, tag)
	}
	s.mu.Unlock()
	_ = s.conn.Close()
}

// alive reports whether the session can still publish.
func (s *session) alive() bool {
	select {
	case <-s.done:
		return false
	default:
		return !s.conn.IsClosed()
	}
}

// publish sends msg and returns the publish to wait on.
func (s *session) publish(ctx context.Context, exchange, key string, mandatory bool, msg amqp.Publishing) (*pending, error) {
	p := &pending{exchange: exchange, key: key, id: msg.MessageId, result: make(chan error, 1)}
	s.publishMu.Lock()
	defer s.publishMu.Unlock()
	s.mu.Lock()
	if s.err != nil {
		err := s.err
		s.mu.Unlock()
		return nil, err
	}
	// Registered before the publish so that its confirm finds it.
	tag := s.ch.GetNextPublishSeqNo()
	s.pending[tag] = p
	s.mu.Unlock()
	if err := s.ch.PublishWithContext(ctx, exchange, key, mandatory, false, msg); err != nil {
		s.mu.Lock()
		delete(s.pending, tag)
		s.mu.Unlock()
		return nil, err
	}
	return p, nil
}

// exchangeExists checks with a passive declare, on a channel of its own
// since a missing exchange closes the channel, whether exchange exists.
// Existing exchanges are remembered for the session, missing ones for a
// second so that a batch to a missing exchange checks it once.
func (s *session) exchangeExists(exchange string) (bool, error) {
	if exchange == "" {
		return true, nil // the default exchange
	}
	s.checkMu.Lock()
	defer s.checkMu.Unlock()
	if st, ok := s.exchanges[exchange]; ok && (st.exists || time.Since(st.checked) < time.Second) {
		return st.exists, nil
	}
	ch, err := s.conn.Channel()
	if err != nil {
		return false, fmt.Errorf("open channel to check exchange %q: %w", exchange, err)
	}
	err = ch.ExchangeDeclarePassive(exchange, amqp.ExchangeDirect, false, false, false, false, nil)
	if e, ok := errors.AsType[*amqp.Error](err); ok && e.Code == amqp.NotFound {
		s.exchanges[exchange] = exchangeState{exists: false, checked: time.Now()}
		return false, nil
	}
	if err != nil {
		return false, fmt.Errorf("check exchange %q: %w", exchange, err)
	}
	_ = ch.Close()
	s.exchanges[exchange] = exchangeState{exists: true, checked: time.Now()}
	return true, nil
}
