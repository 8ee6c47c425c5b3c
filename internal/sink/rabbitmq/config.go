package rabbitmq

import (
	"errors"
	"fmt"
	"strings"
	"time"
	"unicode/utf8"

	"github.com/outbox-relay/outbox-relay/internal/config/sinkblock"

	amqp "github.com/rabbitmq/amqp091-go"

	"github.com/outbox-relay/outbox-relay/internal/tlsconf"
)

// Defaults of Config.
const (
	DefaultURL             = "amqp://guest:guest@127.0.0.1:5672/"
	DefaultConfirmTimeout  = 5 * time.Second
	DefaultConnectTimeout  = 10 * time.Second
	DefaultMaxMessageBytes = 16 << 20 // RabbitMQ 4's default max_message_size
	DefaultMaxInFlight     = 256
	// maxMessageBytes is RabbitMQ's own ceiling for max_message_size.
	maxMessageBytes = 512 << 20
	// maxShortString is the AMQP limit for exchange names and routing keys.
	maxShortString = 255
)

// Config is the `rabbitmq:` block of a sink.
type Config struct {
	// URL is the broker's AMQP URI; amqps:// turns on TLS.
	URL string `yaml:"url"`
	// Exchange, when set, receives every message, with the destination as
	// the routing key. When empty, a destination is "exchange/routing.key".
	Exchange string `yaml:"exchange"`
	// Mandatory makes the broker return a message that no queue is bound
	// for; the message then fails terminally. Default true.
	Mandatory *bool `yaml:"mandatory"`
	// ConfirmTimeout bounds the wait for a publisher confirm.
	ConfirmTimeout time.Duration `yaml:"confirm_timeout"`
	// ConnectTimeout bounds dialing and the AMQP handshake.
	ConnectTimeout time.Duration `yaml:"connect_timeout"`
	// MaxMessageBytes is the largest payload sent; larger ones fail
	// terminally. Keep it at or below the broker's max_message_size.
	MaxMessageBytes int `yaml:"max_message_bytes"`
	// MaxInFlight bounds the unconfirmed messages of one Publish call.
	MaxInFlight int `yaml:"max_in_flight"`
	// MaxInFlightPerKey bounds the unconfirmed messages of one key
	// (default 1). One channel's confirms come in order, so more of a key
	// may travel together; but a queue that rejects publishes when full
	// (x-overflow reject-publish) can refuse one message and take the next
	// of its key: that refused message then goes to the dead letters
	// (overtaken) rather than being sent again after its successor.
	MaxInFlightPerKey int `yaml:"max_in_flight_per_key"`
	// TLS secures the connection (also turned on by an amqps:// URL).
	TLS tlsconf.Config `yaml:"tls"`
}

// Defaults fills in unset fields.
func (c *Config) Defaults() {
	if c.URL == "" {
		c.URL = DefaultURL
	}
	if c.Mandatory == nil {
		t := true
		c.Mandatory = &t
	}
	if c.ConfirmTimeout == 0 {
		c.ConfirmTimeout = DefaultConfirmTimeout
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
	if c.MaxInFlightPerKey == 0 {
		c.MaxInFlightPerKey = 1
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
	} else if _, err := amqp.ParseURI(c.URL); err != nil {
		add("url", "%v", err)
	}
	if err := checkName(c.Exchange); err != nil {
		add("exchange", "%v", err)
	}
	if c.ConfirmTimeout < 0 {
		add("confirm_timeout", "must not be negative")
	}
	if c.ConnectTimeout < 0 {
		add("connect_timeout", "must not be negative")
	}
	if c.MaxMessageBytes < 0 || c.MaxMessageBytes > maxMessageBytes {
		add("max_message_bytes", "must be between 0 (the default) and RabbitMQ's ceiling of %d", maxMessageBytes)
	}
	if c.MaxInFlight < 0 {
		add("max_in_flight", "must not be negative")
	}
	if c.MaxInFlightPerKey < 0 || c.MaxInFlight > 0 && c.MaxInFlightPerKey > c.MaxInFlight {
		add("max_in_flight_per_key", "must be between 0 (the default, 1) and max_in_flight (%d)", c.MaxInFlight)
	}
	return append(ps, c.TLS.Problems()...)
}

// OwnTimeout is the sink's own bound on one message: the wait for a publisher confirm.
func (c Config) OwnTimeout() time.Duration { return c.ConfirmTimeout }

// Block registers the `rabbitmq:` block of a sink under the type name rabbitmq
// (see package sink/all).
var Block = sinkblock.Type{Name: "rabbitmq", New: func() sinkblock.Settings { return new(Config) }}

// checkName validates an exchange name or routing key as AMQP carries it.
func checkName(s string) error {
	if len(s) > maxShortString {
		return fmt.Errorf("%d bytes, longer than AMQP's %d", len(s), maxShortString)
	}
	if !utf8.ValidString(s) {
		return errors.New("not valid UTF-8")
	}
	return nil
}

// errBadDestination is wrapped by the terminal error of a destination that
// cannot be published to.
var errBadDestination = errors.New("invalid destination")

// route splits a destination into exchange and routing key.
func (c *Config) route(dest string) (exchange, key string, err error) {
	if c.Exchange != "" {
		exchange, key = c.Exchange, dest
	} else {
		var ok bool
		exchange, key, ok = strings.Cut(dest, "/")
		if !ok {
			return "", "", fmt.Errorf("%w %q: no exchange is configured, so it must be \"exchange/routing.key\"", errBadDestination, dest)
		}
	}
	if err := checkName(exchange); err != nil {
		return "", "", fmt.Errorf("%w %q: exchange: %w", errBadDestination, dest, err)
	}
	if err := checkName(key); err != nil {
		return "", "", fmt.Errorf("%w %q: routing key: %w", errBadDestination, dest, err)
	}
	return exchange, key, nil
}
