package mqtt

import (
	"crypto/rand"
	"encoding/hex"
	"fmt"
	"math"
	"net"
	"net/url"
	"time"

	"github.com/outbox-relay/outbox-relay/internal/config/sinkblock"

	"github.com/outbox-relay/outbox-relay/internal/tlsconf"
)

// Defaults of Config.
const (
	DefaultURL             = "mqtt://127.0.0.1:1883"
	DefaultClientIDPrefix  = "outbox-relay-"
	DefaultKeepAlive       = 30 * time.Second
	DefaultPublishTimeout  = 5 * time.Second
	DefaultConnectTimeout  = 10 * time.Second
	DefaultMaxMessageBytes = 16 << 20
	DefaultMaxInFlight     = 256
	// maxPacket is MQTT's largest packet (the variable byte integer limit).
	maxPacket = 268_435_455
)

// Config is the `mqtt:` block of a sink.
type Config struct {
	// URL is the server: mqtt:// or tcp:// (port 1883 by default), mqtts://,
	// ssl:// or tls:// for TLS (port 8883 by default).
	URL string `yaml:"url"`
	// ClientID identifies the connection; default outbox-relay-<random>.
	// Two relays must not share one: the server drops the older connection.
	ClientID string `yaml:"client_id"`
	// Username and Password authenticate to the server.
	Username string `yaml:"username"`
	Password string `yaml:"password"`
	// KeepAlive is the interval of keep-alive pings.
	KeepAlive time.Duration `yaml:"keepalive"`
	// PublishTimeout bounds the wait for a PUBACK.
	PublishTimeout time.Duration `yaml:"publish_timeout"`
	// ConnectTimeout bounds dialing and the CONNECT/CONNACK exchange.
	ConnectTimeout time.Duration `yaml:"connect_timeout"`
	// SessionExpiry is sent in CONNECT: how long the server keeps the
	// session after a disconnect. Default 0 (none); a publisher has no
	// subscriptions to keep.
	SessionExpiry time.Duration `yaml:"session_expiry"`
	// MaxMessageBytes is the largest payload sent; larger ones fail
	// terminally.
	MaxMessageBytes int `yaml:"max_message_bytes"`
	// MaxInFlight bounds the unacknowledged messages of one Publish call
	// (the server's Receive Maximum bounds the connection's).
	MaxInFlight int `yaml:"max_in_flight"`
	// TLS secures the connection (also turned on by an mqtts:// URL).
	TLS tlsconf.Config `yaml:"tls"`
}

// Defaults fills in unset fields.
func (c *Config) Defaults() {
	if c.URL == "" {
		c.URL = DefaultURL
	}
	if c.ClientID == "" {
		b := make([]byte, 6)
		_, _ = rand.Read(b)
		c.ClientID = DefaultClientIDPrefix + hex.EncodeToString(b)
	}
	if c.KeepAlive == 0 {
		c.KeepAlive = DefaultKeepAlive
	}
	if c.PublishTimeout == 0 {
		c.PublishTimeout = DefaultPublishTimeout
	}
	if c.ConnectTimeout == 0 {
		c.ConnectTimeout = DefaultConnectTimeout
	}
	if c.MaxMessageBytes == 0 {
		c.MaxMessageBytes = DefaultMaxMessageBytes
	}
	if c.MaxInFlight == 0 {
		c.MaxInFlight = DefaultMaxInFlight
	}
}

// Problems reports invalid settings; Field is relative to the block.
func (c Config) Problems() []sinkblock.Problem {
	var ps []sinkblock.Problem
	add := func(field, format string, args ...any) {
		ps = append(ps, sinkblock.Problem{Field: field, Msg: fmt.Sprintf(format, args...)})
	}
	if c.URL == "" {
		add("url", "required")
	} else if _, _, err := parseURL(c.URL); err != nil {
		add("url", "%v", err)
	}
	if len(c.ClientID) > 65535 {
		add("client_id", "longer than 65535 bytes")
	}
	if c.Password != "" && c.Username == "" {
		add("username", "required with a password")
	}
	if c.KeepAlive < 0 || c.KeepAlive > math.MaxUint16*time.Second {
		add("keepalive", "must be between 0 and %v", math.MaxUint16*time.Second)
	}
	if c.KeepAlive%time.Second != 0 {
		add("keepalive", "must be whole seconds")
	}
	if c.PublishTimeout < 0 {
		add("publish_timeout", "must not be negative")
	}
	if c.ConnectTimeout < 0 {
		add("connect_timeout", "must not be negative")
	}
	if c.SessionExpiry < 0 || c.SessionExpiry > math.MaxUint32*time.Second {
		add("session_expiry", "must be between 0 and %v", math.MaxUint32*time.Second)
	}
	if c.MaxMessageBytes < 0 || c.MaxMessageBytes > maxPacket {
		add("max_message_bytes", "must be between 0 (the default) and MQTT's ceiling of %d", maxPacket)
	}
	if c.MaxInFlight < 0 {
		add("max_in_flight", "must not be negative")
	}
	return append(ps, c.TLS.Problems()...)
}

// OwnTimeout is the sink's own bound on one message: the wait for a PUBACK.
func (c Config) OwnTimeout() time.Duration { return c.PublishTimeout }

// Block registers the `mqtt:` block of a sink under the type name mqtt
// (see package sink/all).
var Block = sinkblock.Type{Name: "mqtt", New: func() sinkblock.Settings { return new(Config) }}

// parseURL returns the address to dial and whether the scheme asks for TLS.
func parseURL(s string) (addr string, tls bool, err error) {
	u, err := url.Parse(s)
	if err != nil {
		return "", false, err
	}
	port := "1883"
	switch u.Scheme {
	case "mqtt", "tcp":
	case "mqtts", "ssl", "tls":
		tls, port = true, "8883"
	default:
		return "", false, fmt.Errorf("scheme %q: want mqtt, tcp, mqtts, ssl or tls", u.Scheme)
	}
	if u.Hostname() == "" {
		return "", false, fmt.Errorf("no host in %q", s)
	}
	if u.Port() != "" {
		port = u.Port()
	}
	return net.JoinHostPort(u.Hostname(), port), tls, nil
}
