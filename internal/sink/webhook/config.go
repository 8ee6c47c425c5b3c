package webhook

import (
	"fmt"
	"net/http"
	"net/url"
	"strings"
	"time"

	"github.com/outbox-relay/outbox-relay/internal/config/sinkblock"
)

// Presets.
const (
	// PresetNone posts each payload as it is to Config.URL.
	PresetNone = ""
	// PresetAbly publishes to Ably's REST API (see ably.go).
	PresetAbly = "ably"
)

// Defaults applied to zero values.
const (
	DefaultMethod          = http.MethodPost
	DefaultTimeout         = 10 * time.Second
	DefaultConcurrency     = 16
	DefaultMaxMessageBytes = 1 << 20
	DefaultSignatureHeader = "X-Outbox-Signature"
	// DefaultAblyBaseURL is Ably's REST endpoint as its REST API reference
	// names it (the older https://rest.ably.io still answers).
	DefaultAblyBaseURL = "https://main.realtime.ably.net"
	// AblyMaxMessageBytes is Ably's default message size limit (64 KiB).
	AblyMaxMessageBytes = 65536
)

// placeholder is replaced by the message's destination in Config.URL.
const placeholder = "{destination}"

// Config configures one webhook sink (the sink's `webhook:` block).
type Config struct {
	// Preset is "" or "none" (a plain webhook), or "ably" (Ably's REST
	// publish API).
	Preset string `yaml:"preset"`
	// URL is where messages are sent; "{destination}" in it is replaced by
	// the route's destination. Not used by the ably preset.
	URL string `yaml:"url"`
	// Method is POST (default) or PUT.
	Method string `yaml:"method"`
	// Headers are static request headers (Authorization...), already
	// expanded from ${ENV} by the configuration loader.
	Headers map[string]string `yaml:"headers"`
	// ContentType overrides the detected type (application/json when the
	// payload is valid JSON, else application/octet-stream).
	ContentType string `yaml:"content_type"`
	// Timeout bounds one request, from sending to the end of the response
	// headers and body. Default 10s.
	Timeout time.Duration `yaml:"timeout"`
	// Concurrency is how many requests are in flight at most, across all
	// Publish calls. Default 16.
	Concurrency int `yaml:"concurrency"`
	// MaxMessageBytes is the largest payload sent; larger messages are
	// dead-lettered. Default 1 MiB (64 KiB for the ably preset).
	MaxMessageBytes int `yaml:"max_message_bytes"`
	// HMAC signs each request body when a secret is set.
	HMAC HMAC `yaml:"hmac"`
	// ErrorCodes classifies failures by a code read from the response body.
	ErrorCodes ErrorCodes `yaml:"error_codes"`
	// ReferencePath is the dot-separated path, in a JSON response body, of
	// the destination's reference for the message (e.g. "payment.id"),
	// recorded by sources that keep receipts (state mode queue).
	ReferencePath string `yaml:"reference_path"`
	TLS           TLS    `yaml:"tls"`
	// Ably configures the ably preset.
	Ably Ably `yaml:"ably"`
}

// HMAC configures request signing.
type HMAC struct {
	// Secret is the shared key. Empty disables signing.
	Secret string `yaml:"secret"`
	// Header carries the signature. Default X-Outbox-Signature.
	Header string `yaml:"header"`
}

// ErrorCodes maps error codes found in a response body to a class, taking
// precedence over the status code's class.
type ErrorCodes struct {
	// Path is the dot-separated path of the code in a JSON response body,
	// e.g. "error.code".
	Path string `yaml:"path"`
	// Codes maps a code to "retryable" or "terminal". A key ending in "*"
	// matches every code with that prefix ("401*"); an exact key wins over
	// a prefix, and a longer prefix over a shorter one.
	Codes map[string]string `yaml:"codes"`
}

// TLS configures https connections.
type TLS struct {
	// CAFile is a PEM bundle trusted instead of the system roots.
	CAFile string `yaml:"ca_file"`
	// InsecureSkipVerify disables certificate verification (tests only).
	InsecureSkipVerify bool `yaml:"insecure_skip_verify"`
}

// Ably configures the ably preset.
type Ably struct {
	// APIKey is the Ably API key ("appId.keyId:secret"), sent with Basic
	// authentication.
	APIKey string `yaml:"api_key"`
	// BaseURL is the REST endpoint. Default https://main.realtime.ably.net.
	BaseURL string `yaml:"base_url"`
}

// Class names used in ErrorCodes.Codes.
const (
	ClassRetryable = "retryable"
	ClassTerminal  = "terminal"
)

// Defaults fills zero values.
func (c *Config) Defaults() {
	c.Preset = strings.ToLower(strings.TrimSpace(c.Preset))
	if c.Preset == "none" {
		c.Preset = PresetNone
	}
	if c.Method == "" {
		c.Method = DefaultMethod
	}
	c.Method = strings.ToUpper(c.Method)
	if c.Timeout == 0 {
		c.Timeout = DefaultTimeout
	}
	if c.Concurrency == 0 {
		c.Concurrency = DefaultConcurrency
	}
	if c.HMAC.Header == "" {
		c.HMAC.Header = DefaultSignatureHeader
	}
	if c.Preset == PresetAbly {
		if c.Ably.BaseURL == "" {
			c.Ably.BaseURL = DefaultAblyBaseURL
		}
		if c.MaxMessageBytes == 0 {
			c.MaxMessageBytes = AblyMaxMessageBytes
		}
		if c.ErrorCodes.Path == "" {
			c.ErrorCodes.Path = ablyErrorCodePath
		}
		return
	}
	if c.MaxMessageBytes == 0 {
		c.MaxMessageBytes = DefaultMaxMessageBytes
	}
}

// Problems lists every invalid setting, with Field relative to the sink's
// block. Call Defaults first.
func (c Config) Problems() []sinkblock.Problem {
	var ps []sinkblock.Problem
	add := func(field, format string, args ...any) {
		ps = append(ps, sinkblock.Problem{Field: field, Msg: fmt.Sprintf(format, args...)})
	}
	switch c.Preset {
	case PresetNone:
		ps = append(ps, urlProblems(c.URL)...)
	case PresetAbly:
		if c.URL != "" {
			add("url", "not used by the ably preset (set ably.base_url)")
		}
		if c.Ably.APIKey == "" {
			add("ably.api_key", "required by the ably preset")
		} else if !strings.Contains(c.Ably.APIKey, ":") {
			add("ably.api_key", "an Ably API key has the form appId.keyId:secret")
		}
		if p := absoluteURLProblem(c.Ably.BaseURL); p != "" {
			add("ably.base_url", "%s", p)
		}
		if c.HMAC.Secret != "" {
			add("hmac.secret", "not used by the ably preset")
		}
		if c.ContentType != "" {
			add("content_type", "not used by the ably preset (it sends JSON)")
		}
	default:
		add("preset", "unknown preset %q (want ably or none)", c.Preset)
	}
	if c.Method != http.MethodPost && c.Method != http.MethodPut {
		add("method", "must be POST or PUT, not %q", c.Method)
	} else if c.Preset == PresetAbly && c.Method != http.MethodPost {
		add("method", "the ably preset uses POST")
	}
	for k, v := range c.Headers {
		if !validHeaderName(k) {
			add("headers."+k, "not a valid HTTP header name")
		} else if !validHeaderValue(v) {
			add("headers."+k, "value has control characters")
		}
	}
	if c.Timeout < 0 {
		add("timeout", "must not be negative")
	}
	if c.Concurrency < 1 {
		add("concurrency", "must be at least 1")
	}
	if c.MaxMessageBytes < 0 {
		add("max_message_bytes", "must not be negative")
	}
	if !validHeaderName(c.HMAC.Header) {
		add("hmac.header", "not a valid HTTP header name")
	}
	for code, class := range c.ErrorCodes.Codes {
		if class != ClassRetryable && class != ClassTerminal {
			add("error_codes.codes."+code, "must be retryable or terminal, not %q", class)
		}
	}
	if len(c.ErrorCodes.Codes) > 0 && c.ErrorCodes.Path == "" {
		add("error_codes.path", "required when error_codes.codes is set")
	}
	if c.TLS.CAFile != "" && c.TLS.InsecureSkipVerify {
		add("tls.insecure_skip_verify", "conflicts with tls.ca_file")
	}
	return ps
}

// OwnTimeout is the sink's own bound on one message: one request.
func (c Config) OwnTimeout() time.Duration { return c.Timeout }

// Block registers the `webhook:` block of a sink under the type name webhook
// (see package sink/all).
var Block = sinkblock.Type{Name: "webhook", New: func() sinkblock.Settings { return new(Config) }}

// urlProblems validates a URL template: it must be "{destination}" alone or
// an absolute http(s) URL whose host has no placeholder.
func urlProblems(tmpl string) []sinkblock.Problem {
	bad := func(msg string) []sinkblock.Problem { return []sinkblock.Problem{{Field: "url", Msg: msg}} }
	switch {
	case tmpl == "":
		return bad("required")
	case tmpl == placeholder:
		return nil
	case strings.HasPrefix(tmpl, placeholder):
		return bad("only the whole URL may be " + placeholder + ": put a fixed scheme and host before it")
	}
	if hostHasPlaceholder(tmpl) {
		return bad(placeholder + " may not be in the host")
	}
	if p := absoluteURLProblem(strings.ReplaceAll(tmpl, placeholder, "x")); p != "" {
		return bad(p)
	}
	return nil
}

// hostHasPlaceholder reports whether the placeholder falls inside the
// authority part of tmpl.
func hostHasPlaceholder(tmpl string) bool {
	i := strings.Index(tmpl, "://")
	if i < 0 {
		return false
	}
	rest := tmpl[i+3:]
	end := strings.IndexAny(rest, "/?#")
	if end < 0 {
		end = len(rest)
	}
	return strings.Contains(rest[:end], placeholder)
}

// absoluteURLProblem says what is wrong with s as an absolute http(s) URL,
// or "".
func absoluteURLProblem(s string) string {
	u, err := url.Parse(s)
	if err != nil {
		return fmt.Sprintf("not a URL: %v", err)
	}
	if u.Scheme != "http" && u.Scheme != "https" {
		return fmt.Sprintf("scheme must be http or https, not %q", u.Scheme)
	}
	if u.Host == "" {
		return "has no host"
	}
	return ""
}
