package mqtt

import (
	"context"
	"crypto/tls"
	"errors"
	"fmt"
	"net"
	"time"

	"github.com/eclipse/paho.golang/paho"

	"github.com/outbox-relay/outbox-relay/internal/sink"
)

// errConnectionLost is wrapped by the error of a message in flight when
// its connection dropped.
var errConnectionLost = errors.New("connection lost")

// session is one MQTT connection.
type session struct {
	cli *paho.Client
	// maxPacket is the server's Maximum Packet Size (0: MQTT's own limit).
	maxPacket int
	// ctx ends, with the reason as its cause, when the connection is gone.
	ctx    context.Context
	cancel context.CancelCauseFunc
	ended  chan struct{} // closed once the session's end is handled
}

// connect dials addr and exchanges CONNECT/CONNACK.
func connect(ctx context.Context, cfg *Config, addr string, tc *tls.Config) (*session, error) {
	ctx, cancel := context.WithTimeout(ctx, cfg.ConnectTimeout)
	defer cancel()
	d := &net.Dialer{}
	var conn net.Conn
	var err error
	if tc != nil {
		conn, err = (&tls.Dialer{NetDialer: d, Config: tc}).DialContext(ctx, "tcp", addr)
	} else {
		conn, err = d.DialContext(ctx, "tcp", addr)
	}
	if err != nil {
		return nil, fmt.Errorf("dial %s: %w", addr, err)
	}
	sctx, end := context.WithCancelCause(context.Background())
	s := &session{ctx: sctx, cancel: end, ended: make(chan struct{})}
	s.cli = paho.NewClient(paho.ClientConfig{
		ClientID:      cfg.ClientID,
		Conn:          conn,
		PacketTimeout: cfg.PublishTimeout,
		OnClientError: func(err error) { end(sink.Down(fmt.Errorf("%w: %w", errConnectionLost, err))) },
		OnServerDisconnect: func(d *paho.Disconnect) {
			end(fmt.Errorf("%w: the server disconnected with reason code 0x%02x", errConnectionLost, d.ReasonCode))
		},
	})
	expiry := uint32(cfg.SessionExpiry / time.Second)
	cp := &paho.Connect{
		ClientID:   cfg.ClientID,
		KeepAlive:  uint16(cfg.KeepAlive / time.Second),
		CleanStart: true,
		Properties: &paho.ConnectProperties{SessionExpiryInterval: &expiry},
	}
	if cfg.Username != "" {
		cp.Username, cp.UsernameFlag = cfg.Username, true
	}
	if cfg.Password != "" {
		cp.Password, cp.PasswordFlag = []byte(cfg.Password), true
	}
	ca, err := s.cli.Connect(ctx, cp)
	if err != nil {
		_ = conn.Close()
		end(err)
		if ca != nil {
			return nil, fmt.Errorf("connect: reason code 0x%02x: %w", ca.ReasonCode, err)
		}
		return nil, fmt.Errorf("connect: %w", err)
	}
	if ca.Properties != nil {
		if q := ca.Properties.MaximumQoS; q != nil && *q < 1 {
			_ = s.cli.Disconnect(&paho.Disconnect{})
			end(errors.New("server without QoS 1"))
			return nil, errors.New("connect: the server does not support QoS 1")
		}
		if m := ca.Properties.MaximumPacketSize; m != nil {
			s.maxPacket = int(*m)
		}
	}
	go func() {
		<-s.cli.Done()
		end(sink.Down(errConnectionLost))
	}()
	return s, nil
}

func (s *session) alive() bool { return s.ctx.Err() == nil }

// close disconnects gracefully.
func (s *session) close() {
	alive := s.alive()
	// The cause is set first: the disconnect ends the client, whose end
	// would otherwise be taken for a lost connection.
	s.cancel(ErrClosed)
	if alive {
		_ = s.cli.Disconnect(&paho.Disconnect{ReasonCode: 0})
	}
}

// publish sends pb and waits for its PUBACK, the connection's end or ctx.
func (s *session) publish(ctx context.Context, pb *paho.Publish, timeout time.Duration) error {
	ctx, cancel := context.WithTimeoutCause(ctx, timeout, errPublishTimeout)
	defer cancel()
	// The client waits for a PUBACK until its context ends, even when the
	// connection is gone: end the wait with the connection.
	ctx, cancelLost := context.WithCancelCause(ctx)
	stop := context.AfterFunc(s.ctx, func() { cancelLost(context.Cause(s.ctx)) })
	defer stop()
	resp, err := s.cli.Publish(ctx, pb)
	if resp != nil && resp.ReasonCode >= 0x80 {
		var reason string
		if resp.Properties != nil {
			reason = resp.Properties.ReasonString
		}
		return refused(pb.Topic, resp.ReasonCode, reason)
	}
	if err == nil {
		return nil
	}
	if cause := context.Cause(ctx); cause != nil {
		err = cause
	}
	return fmt.Errorf("publish to %q: %w", pb.Topic, err)
}

// errPublishTimeout is the cause of a wait for a PUBACK that took too long.
var errPublishTimeout = errors.New("no PUBACK in time")
