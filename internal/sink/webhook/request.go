package webhook

import (
	"bytes"
	"context"
	"crypto/hmac"
	"crypto/sha256"
	"encoding/hex"
	"encoding/json"
	"errors"
	"fmt"
	"net/http"
	"net/url"
	"strconv"
	"strings"
	"time"

	"github.com/outbox-relay/outbox-relay/internal/sink"
)

// HeaderPrefix starts the name of every message header sent as an HTTP
// header.
const HeaderPrefix = "X-Outbox-"

// KeyHeader carries the message key, percent-encoded as a URL path segment
// (RFC 3986), so that any bytes survive.
const KeyHeader = HeaderPrefix + "Key"

// urlTemplate renders Config.URL for one destination.
type urlTemplate struct {
	// whole is true when the template is just the placeholder: the
	// destination is the URL.
	whole bool
	// parts are the template split at each placeholder; escape[i] escapes
	// the destination put between parts[i] and parts[i+1].
	parts  []string
	escape []func(string) string
}

func parseTemplate(tmpl string) urlTemplate {
	if tmpl == placeholder {
		return urlTemplate{whole: true}
	}
	t := urlTemplate{parts: strings.Split(tmpl, placeholder)}
	seen := 0
	for _, p := range t.parts[:len(t.parts)-1] {
		seen += len(p)
		// A placeholder after '?' or '#' is in the query or fragment.
		if strings.ContainsAny(tmpl[:seen], "?#") {
			t.escape = append(t.escape, url.QueryEscape)
		} else {
			t.escape = append(t.escape, pathEscape)
		}
		seen += len(placeholder)
	}
	return t
}

// pathEscape escapes s as one path segment. A destination "." or ".." is
// percent-encoded too, so that no server resolves it as a dot segment and
// routes the request elsewhere.
func pathEscape(s string) string {
	if s == "." || s == ".." {
		return strings.Repeat("%2E", len(s))
	}
	return url.PathEscape(s)
}

// render returns the URL for dest, or a terminal error when the result is
// not an absolute http(s) URL.
func (t urlTemplate) render(dest string) (string, error) {
	if t.whole {
		if p := absoluteURLProblem(dest); p != "" {
			return "", sink.Terminal(fmt.Errorf("destination %q as a URL: %s", dest, p))
		}
		return dest, nil
	}
	if len(t.parts) == 1 {
		return t.parts[0], nil
	}
	if dest == "" {
		return "", sink.Terminal(errors.New("empty destination"))
	}
	var b strings.Builder
	for i, p := range t.parts {
		b.WriteString(p)
		if i < len(t.escape) {
			b.WriteString(t.escape[i](dest))
		}
	}
	s := b.String()
	if p := absoluteURLProblem(s); p != "" {
		return "", sink.Terminal(fmt.Errorf("destination %q gives URL %q: %s", dest, s, p))
	}
	return s, nil
}

// headerName maps a message header key onto its HTTP header name:
// HeaderPrefix, then the key with "_" replaced by "-" (proxies such as nginx
// drop names with underscores by default).
func headerName(key string) string {
	return HeaderPrefix + strings.ReplaceAll(key, "_", "-")
}

// contentType is application/json for a valid JSON payload, else
// application/octet-stream.
func contentType(payload []byte) string {
	if json.Valid(payload) {
		return "application/json"
	}
	return "application/octet-stream"
}

// Sign returns the signature header value for body sent at t:
// "t=<unix seconds>,v1=<hex HMAC-SHA256 of "<unix seconds>.<body>">".
func Sign(secret []byte, t time.Time, body []byte) string {
	ts := strconv.FormatInt(t.Unix(), 10)
	mac := hmac.New(sha256.New, secret)
	mac.Write([]byte(ts))
	mac.Write([]byte{'.'})
	mac.Write(body)
	return "t=" + ts + ",v1=" + hex.EncodeToString(mac.Sum(nil))
}

// newRequest builds the request for m. Its errors are terminal: the
// message cannot be expressed as a request, and no retry changes that.
func (p *Publisher) newRequest(ctx context.Context, m *sink.Message) (*http.Request, error) {
	if p.maxBytes > 0 && len(m.Payload) > p.maxBytes {
		return nil, sink.Terminal(fmt.Errorf("message too large: %d bytes, the sink accepts at most %d", len(m.Payload), p.maxBytes))
	}
	if p.ably != nil {
		return p.ably.newRequest(ctx, p, m)
	}
	target, err := p.tmpl.render(m.Destination)
	if err != nil {
		return nil, err
	}
	req, err := http.NewRequestWithContext(ctx, p.cfg.Method, target, bytes.NewReader(m.Payload))
	if err != nil {
		return nil, sink.Terminal(fmt.Errorf("request for %q: %w", target, err))
	}
	ct := p.cfg.ContentType
	if ct == "" {
		ct = contentType(m.Payload)
	}
	req.Header.Set("Content-Type", ct)
	p.setCommon(req, m)
	if m.Key != nil {
		req.Header.Set(KeyHeader, url.PathEscape(string(m.Key)))
	}
	for _, h := range m.Headers {
		name := headerName(h.Key)
		if !validHeaderName(name) {
			return nil, sink.Terminal(fmt.Errorf("header %q cannot be an HTTP header name", h.Key))
		}
		if !validHeaderValue(string(h.Value)) {
			return nil, sink.Terminal(fmt.Errorf("header %q has a value with control characters", h.Key))
		}
		req.Header.Add(name, string(h.Value))
	}
	if p.secret != nil {
		req.Header.Set(p.cfg.HMAC.Header, Sign(p.secret, time.Now(), m.Payload))
	}
	return req, nil
}

// setCommon sets the headers every request carries: User-Agent, the
// configured static headers, and Idempotency-Key.
func (p *Publisher) setCommon(req *http.Request, m *sink.Message) {
	req.Header.Set("User-Agent", userAgent)
	for k, v := range p.cfg.Headers {
		req.Header.Set(k, v)
	}
	if m.ID != "" {
		// Also makes Go's transport resend the request on a keep-alive
		// connection the server closed before answering.
		req.Header.Set("Idempotency-Key", m.ID)
	}
}

// validHeaderName reports whether s is an HTTP token (RFC 9110 5.1).
func validHeaderName(s string) bool {
	if s == "" {
		return false
	}
	for i := range len(s) {
		c := s[i]
		switch {
		case c >= 'a' && c <= 'z', c >= 'A' && c <= 'Z', c >= '0' && c <= '9':
		case strings.IndexByte("!#$%&'*+-.^_`|~", c) >= 0:
		default:
			return false
		}
	}
	return true
}

// validHeaderValue reports whether s has no control characters other than
// tab.
func validHeaderValue(s string) bool {
	for i := range len(s) {
		c := s[i]
		if (c < ' ' && c != '\t') || c == 0x7f {
			return false
		}
	}
	return true
}
