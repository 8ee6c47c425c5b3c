package webhook

import (
	"context"
	"crypto/tls"
	"crypto/x509"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"net"
	"net/http"
	"net/url"
	"os"
	"sync/atomic"
	"time"

	"github.com/outbox-relay/outbox-relay/internal/sink"
)

const userAgent = "outbox-relay"

// Publisher sends messages as HTTP requests. It is safe for concurrent use.
type Publisher struct {
	cfg      Config
	client   *http.Client
	tmpl     urlTemplate
	ably     *ablyPublisher // nil unless the ably preset
	secret   []byte         // HMAC key, nil when unsigned
	codes    codeTable
	sem      chan struct{} // one slot per request in flight
	maxBytes int
	logger   *slog.Logger
	closed   atomic.Bool
}

var _ sink.Publisher = (*Publisher)(nil)

// Option customises New.
type Option func(*options)

type options struct {
	logger *slog.Logger
}

// WithLogger routes the publisher's logs to l.
func WithLogger(l *slog.Logger) Option {
	return func(o *options) { o.logger = l }
}

// ErrClosed is returned (retryable) for messages published after Close.
var ErrClosed = errors.New("webhook publisher closed")

// New creates a Publisher for cfg, after applying Defaults. It does not
// connect: use Ping to check that the server answers.
func New(cfg Config, opts ...Option) (*Publisher, error) {
	o := options{logger: slog.New(slog.DiscardHandler)}
	for _, opt := range opts {
		opt(&o)
	}
	cfg.Defaults()
	if ps := cfg.Problems(); len(ps) > 0 {
		errs := make([]error, len(ps))
		for i, p := range ps {
			errs[i] = fmt.Errorf("%s: %s", p.Field, p.Msg)
		}
		return nil, fmt.Errorf("webhook sink: %w", errors.Join(errs...))
	}
	tc, err := tlsConfig(cfg.TLS)
	if err != nil {
		return nil, fmt.Errorf("webhook sink: %w", err)
	}
	p := &Publisher{
		cfg:      cfg,
		client:   newClient(cfg, tc),
		sem:      make(chan struct{}, cfg.Concurrency),
		maxBytes: cfg.MaxMessageBytes,
		logger:   o.logger,
	}
	if cfg.HMAC.Secret != "" {
		p.secret = []byte(cfg.HMAC.Secret)
	}
	if cfg.Preset == PresetAbly {
		p.ably = newAbly(cfg.Ably)
		p.codes = newCodeTable(ablyCodes, cfg.ErrorCodes.Codes)
	} else {
		p.tmpl = parseTemplate(cfg.URL)
		p.codes = newCodeTable(cfg.ErrorCodes.Codes)
	}
	return p, nil
}

// newClient builds one client whose transport keeps enough idle
// connections per host for every request slot. Redirects are not followed.
func newClient(cfg Config, tc *tls.Config) *http.Client {
	dialer := &net.Dialer{Timeout: min(cfg.Timeout, 10*time.Second), KeepAlive: 30 * time.Second}
	tr := &http.Transport{
		Proxy:                 http.ProxyFromEnvironment,
		DialContext:           dialer.DialContext,
		ForceAttemptHTTP2:     true,
		MaxIdleConns:          max(100, 2*cfg.Concurrency),
		MaxIdleConnsPerHost:   cfg.Concurrency,
		IdleConnTimeout:       90 * time.Second,
		TLSHandshakeTimeout:   10 * time.Second,
		ExpectContinueTimeout: time.Second,
		TLSClientConfig:       tc,
	}
	return &http.Client{
		Transport: tr,
		CheckRedirect: func(*http.Request, []*http.Request) error {
			return http.ErrUseLastResponse
		},
	}
}

func tlsConfig(t TLS) (*tls.Config, error) {
	tc := &tls.Config{MinVersion: tls.VersionTLS12, InsecureSkipVerify: t.InsecureSkipVerify} //nolint:gosec // opt-in
	if t.CAFile != "" {
		pem, err := os.ReadFile(t.CAFile)
		if err != nil {
			return nil, fmt.Errorf("tls.ca_file: %w", err)
		}
		tc.RootCAs = x509.NewCertPool()
		if !tc.RootCAs.AppendCertsFromPEM(pem) {
			return nil, fmt.Errorf("tls.ca_file: no certificate in %s", t.CAFile)
		}
	}
	return tc, nil
}

// MaxMessageBytes is the largest payload Publish sends.
func (p *Publisher) MaxMessageBytes() int { return p.maxBytes }

// Ping reports whether the server answers. For the ably preset it asks
// Ably's time endpoint for a 2xx; otherwise any HTTP response to a HEAD of
// the URL's root counts (the webhook may well refuse HEAD), and a URL that
// is only "{destination}" has no server to ask.
func (p *Publisher) Ping(ctx context.Context) error {
	if p.closed.Load() {
		return ErrClosed
	}
	method, target := http.MethodHead, ""
	if p.ably != nil {
		method, target = http.MethodGet, p.ably.pingURL()
	} else {
		if p.tmpl.whole {
			return nil
		}
		u, err := url.Parse(p.tmpl.parts[0])
		if err != nil {
			return fmt.Errorf("ping: %w", err)
		}
		target = u.Scheme + "://" + u.Host + "/"
	}
	ctx, cancel := context.WithTimeout(ctx, p.cfg.Timeout)
	defer cancel()
	req, err := http.NewRequestWithContext(ctx, method, target, nil)
	if err != nil {
		return fmt.Errorf("ping: %w", err)
	}
	req.Header.Set("User-Agent", userAgent)
	resp, err := p.client.Do(req)
	if err != nil {
		return fmt.Errorf("ping: %w", err)
	}
	drain(resp.Body)
	if p.ably != nil && (resp.StatusCode < 200 || resp.StatusCode > 299) {
		return fmt.Errorf("ping: %s: HTTP %d", target, resp.StatusCode)
	}
	return nil
}

// Close releases idle connections. Requests in flight finish; later
// Publish calls fail with ErrClosed (retryable).
func (p *Publisher) Close(context.Context) error {
	p.closed.Store(true)
	p.client.CloseIdleConnections()
	return nil
}

// drain reads what is left of a body (up to a bound, so the connection can
// be reused) and closes it.
func drain(body io.ReadCloser) {
	_, _ = io.Copy(io.Discard, io.LimitReader(body, 64<<10))
	_ = body.Close()
}
