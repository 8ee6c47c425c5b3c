package nats

import (
	"fmt"
	"strings"
	"time"

	"github.com/outbox-relay/outbox-relay/internal/config/sinkblock"

	natsclient "github.com/nats-io/nats.go"

	"github.com/outbox-relay/outbox-relay/internal/sink/sinkconf"
	"github.com/outbox-relay/outbox-relay/internal/tlsconf"
)

// Defaults for fields left unset.
const (
	DefaultName          = "outbox-relay"
	DefaultAckTimeout    = 5 * time.Second
	DefaultMaxPending    = 1024
	DefaultReconnectWait = time.Second
	// DefaultRetryHorizon matches the relay's default maximum backoff.
	DefaultRetryHorizon = 5 * time.Minute
)

// Config is the nats block of a sink (sinks.<name>.nats).
type Config struct {
	// URL is the server to connect to (nats://host:4222, tls://host:4222).
	// Several may be given separated by commas.
	URL string `yaml:"url"`
	// Servers lists more servers, tried along with URL.
	Servers []string `yaml:"servers"`
	// Name is the connection name the server shows (default outbox-relay).
	Name string `yaml:"name"`

	// Authentication: at most one of creds_file, token, or user and
	// password.
	CredsFile string `yaml:"creds_file"`
	Token     string `yaml:"token"`
	User      string `yaml:"user"`
	Password  string `yaml:"password"`

	TLS tlsconf.Config `yaml:"tls"`

	// AckTimeout is how long a message waits for its PubAck before it
	// fails, retryable (default 5s).
	AckTimeout sinkconf.Duration `yaml:"ack_timeout"`
	// MaxPending bounds the messages awaiting a PubAck at once, across
	// all Publish calls (default 1024).
	MaxPending int `yaml:"max_pending"`
	// MaxPendingPerKey bounds the messages of one key awaiting a PubAck
	// at once (default 1). More let a hot key's messages travel together;
	// but a stream that refuses messages when full (discard new, by count
	// or bytes) can refuse one and take the next of its key: the refused
	// one then goes to the dead letters (overtaken) rather than being sent
	// again after its successor.
	MaxPendingPerKey int `yaml:"max_pending_per_key"`
	// ReconnectWait is the pause between reconnection attempts
	// (default 1s).
	ReconnectWait sinkconf.Duration `yaml:"reconnect_wait"`
	// RetryHorizon is how long after a failed attempt the relay may retry
	// a message: its maximum backoff (default 5m). A stream whose
	// duplicate window is shorter may store a retried message twice; the
	// publisher warns about such streams.
	RetryHorizon sinkconf.Duration `yaml:"retry_horizon"`
}

// Defaults fills the fields left unset.
func (c *Config) Defaults() {
	if c.Name == "" {
		c.Name = DefaultName
	}
	if c.AckTimeout == 0 {
		c.AckTimeout = sinkconf.Duration(DefaultAckTimeout)
	}
	if c.MaxPending == 0 {
		c.MaxPending = DefaultMaxPending
	}
	if c.MaxPendingPerKey == 0 {
		c.MaxPendingPerKey = 1
	}
	if c.ReconnectWait == 0 {
		c.ReconnectWait = sinkconf.Duration(DefaultReconnectWait)
	}
	if c.RetryHorizon == 0 {
		c.RetryHorizon = sinkconf.Duration(DefaultRetryHorizon)
	}
}

// Problems lists the invalid settings. Zero values are the defaults'
// business and are not reported.
func (c Config) Problems() []sinkblock.Problem {
	var ps []sinkblock.Problem
	add := func(field, format string, args ...any) {
		ps = append(ps, sinkblock.Problem{Field: field, Msg: fmt.Sprintf(format, args...)})
	}
	if strings.TrimSpace(c.URL) == "" && len(c.Servers) == 0 {
		add("url", "required (or servers)")
	}
	for i, u := range c.serverList() {
		if err := checkURL(u); err != nil {
			field := "url"
			if i >= len(splitURLs(c.URL)) {
				field = fmt.Sprintf("servers[%d]", i-len(splitURLs(c.URL)))
			}
			add(field, "%v", err)
		}
	}
	var auth []string
	for _, a := range []struct {
		field string
		set   bool
	}{{"creds_file", c.CredsFile != ""}, {"token", c.Token != ""}, {"user", c.User != "" || c.Password != ""}} {
		if a.set {
			auth = append(auth, a.field)
		}
	}
	if len(auth) > 1 {
		add(auth[1], "give only one of creds_file, token, or user and password")
	}
	if c.Password != "" && c.User == "" {
		add("user", "required with password")
	}
	ps = append(ps, c.TLS.Problems()...)
	if c.AckTimeout < 0 {
		add("ack_timeout", "must be positive, got %s", c.AckTimeout)
	}
	if c.MaxPending < 0 {
		add("max_pending", "must be at least 1, got %d", c.MaxPending)
	}
	if c.MaxPendingPerKey < 0 || c.MaxPending > 0 && c.MaxPendingPerKey > c.MaxPending {
		add("max_pending_per_key", "must be between 0 (the default, 1) and max_pending (%d), got %d", c.MaxPending, c.MaxPendingPerKey)
	}
	if c.ReconnectWait < 0 {
		add("reconnect_wait", "must be positive, got %s", c.ReconnectWait)
	}
	if c.RetryHorizon < 0 {
		add("retry_horizon", "must be positive, got %s", c.RetryHorizon)
	}
	return ps
}

// OwnTimeout is the sink's own bound on one message: the wait for a PubAck.
func (c Config) OwnTimeout() time.Duration { return c.AckTimeout.D() }

// Block registers the `nats:` block of a sink under the type name nats
// (see package sink/all).
var Block = sinkblock.Type{Name: "nats", New: func() sinkblock.Settings { return new(Config) }}

func splitURLs(s string) []string {
	var out []string
	for u := range strings.SplitSeq(s, ",") {
		if u = strings.TrimSpace(u); u != "" {
			out = append(out, u)
		}
	}
	return out
}

// serverList is URL's servers followed by Servers.
func (c Config) serverList() []string {
	out := splitURLs(c.URL)
	for _, s := range c.Servers {
		out = append(out, strings.TrimSpace(s))
	}
	return out
}

func checkURL(u string) error {
	if u == "" {
		return fmt.Errorf("empty server URL")
	}
	scheme, rest, ok := strings.Cut(u, "://")
	if !ok {
		// nats.go accepts host:port and assumes nats://.
		rest = u
		scheme = "nats"
	}
	switch strings.ToLower(scheme) {
	case "nats", "tls", "ws", "wss":
	default:
		return fmt.Errorf("server URL %q: scheme must be nats, tls, ws or wss", u)
	}
	if rest == "" {
		return fmt.Errorf("server URL %q: no host", u)
	}
	return nil
}

// options turns the configuration into connection options.
func (c Config) options() ([]natsclient.Option, error) {
	opts := []natsclient.Option{
		natsclient.Name(c.Name),
		natsclient.MaxReconnects(-1),
		natsclient.ReconnectWait(c.ReconnectWait.D()),
		natsclient.RetryOnFailedConnect(true),
		// Publishes made while reconnecting fail instead of waiting in
		// a buffer: a buffered message could reach the server after an
		// earlier message of its key was lost with the old connection.
		natsclient.ReconnectBufSize(-1),
	}
	switch {
	case c.CredsFile != "":
		opts = append(opts, natsclient.UserCredentials(c.CredsFile))
	case c.Token != "":
		opts = append(opts, natsclient.Token(c.Token))
	case c.User != "":
		opts = append(opts, natsclient.UserInfo(c.User, c.Password))
	}
	if c.TLS != (tlsconf.Config{}) {
		// The server name defaults to the host of each server URL.
		tc, err := c.TLS.Load("")
		if err != nil {
			return nil, err
		}
		opts = append(opts, natsclient.Secure(tc))
	}
	return opts, nil
}
