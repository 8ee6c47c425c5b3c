package redis

import (
	"fmt"
	"net/url"
	"strings"
	"time"

	"github.com/outbox-relay/outbox-relay/internal/config/sinkblock"

	goredis "github.com/redis/go-redis/v9"

	"github.com/outbox-relay/outbox-relay/internal/sink/sinkconf"
	"github.com/outbox-relay/outbox-relay/internal/tlsconf"
)

// Defaults for fields left unset.
const (
	DefaultTimeout = 5 * time.Second
	// DefaultMaxMessageBytes is Redis's default proto-max-bulk-len.
	DefaultMaxMessageBytes = 512 << 20
)

// Config is the redis block of a sink (sinks.<name>.redis).
type Config struct {
	// URL is the server: redis://[user:password@]host:port[/db], or
	// rediss:// for TLS.
	URL string `yaml:"url"`
	// Username and Password authenticate (ACL user, or requirepass with
	// no username); they override the URL's.
	Username string `yaml:"username"`
	Password string `yaml:"password"`
	// DB is the database number; when not 0 it overrides the URL's.
	DB int `yaml:"db"`
	// TLS settings; giving any turns TLS on, as rediss:// does.
	TLS tlsconf.Config `yaml:"tls"`
	// MaxLen caps each stream at about this many entries (XADD MAXLEN ~);
	// 0 keeps every entry.
	MaxLen int64 `yaml:"max_len"`
	// Timeout bounds connecting and each read or write (default 5s).
	Timeout sinkconf.Duration `yaml:"timeout"`
	// MaxMessageBytes is the largest payload sent; larger ones are
	// refused without an attempt (default 512 MiB, the server's
	// proto-max-bulk-len).
	MaxMessageBytes int `yaml:"max_message_bytes"`
}

// Defaults fills the fields left unset.
func (c *Config) Defaults() {
	if c.Timeout == 0 {
		c.Timeout = sinkconf.Duration(DefaultTimeout)
	}
	if c.MaxMessageBytes == 0 {
		c.MaxMessageBytes = DefaultMaxMessageBytes
	}
}

// Problems lists the invalid settings. Zero values are the defaults'
// business and are not reported.
func (c Config) Problems() []sinkblock.Problem {
	var ps []sinkblock.Problem
	add := func(field, format string, args ...any) {
		ps = append(ps, sinkblock.Problem{Field: field, Msg: fmt.Sprintf(format, args...)})
	}
	if strings.TrimSpace(c.URL) == "" {
		add("url", "required")
	} else if _, err := goredis.ParseURL(c.URL); err != nil {
		add("url", "%s", redactedErr(c.URL, err))
	}
	if c.DB < 0 {
		add("db", "must not be negative, got %d", c.DB)
	}
	ps = append(ps, c.TLS.Problems()...)
	if c.MaxLen < 0 {
		add("max_len", "must not be negative, got %d", c.MaxLen)
	}
	if c.Timeout < 0 {
		add("timeout", "must be positive, got %s", c.Timeout)
	}
	if c.MaxMessageBytes < 0 {
		add("max_message_bytes", "must be positive, got %d", c.MaxMessageBytes)
	}
	return ps
}

// OwnTimeout is the sink's own bound on one message: one command.
func (c Config) OwnTimeout() time.Duration { return c.Timeout.D() }

// Block registers the `redis:` block of a sink under the type name redis
// (see package sink/all).
var Block = sinkblock.Type{Name: "redis", New: func() sinkblock.Settings { return new(Config) }}

// redactedErr keeps a password in the URL out of the message.
func redactedErr(raw string, err error) string {
	msg := err.Error()
	if u, perr := url.Parse(raw); perr == nil && u.User != nil {
		if pw, ok := u.User.Password(); ok && pw != "" {
			msg = strings.ReplaceAll(msg, pw, "xxxxx")
		}
	}
	return msg
}

// options turns the configuration into client options.
func (c Config) options() (*goredis.Options, error) {
	o, err := goredis.ParseURL(c.URL)
	if err != nil {
		return nil, fmt.Errorf("url: %s", redactedErr(c.URL, err))
	}
	if c.Username != "" {
		o.Username = c.Username
	}
	if c.Password != "" {
		o.Password = c.Password
	}
	if c.DB != 0 {
		o.DB = c.DB
	}
	if c.TLS != (tlsconf.Config{}) {
		host, _, _ := strings.Cut(o.Addr, ":")
		tc, err := c.TLS.Load(host)
		if err != nil {
			return nil, err
		}
		o.TLSConfig = tc
	}
	t := c.Timeout.D()
	o.DialTimeout, o.ReadTimeout, o.WriteTimeout = t, t, t
	o.ContextTimeoutEnabled = true
	// The relay retries; a pipeline retried by the client after a partial
	// write would store its first messages twice.
	o.MaxRetries = -1
	o.ClientName = "outbox-relay"
	return o, nil
}
