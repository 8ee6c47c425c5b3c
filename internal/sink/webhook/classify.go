package webhook

import (
	"bytes"
	"encoding/json"
	"fmt"
	"net/http"
	"strconv"
	"strings"
	"time"

	"github.com/outbox-relay/outbox-relay/internal/sink"
)

// StatusError is a response other than 2xx.
type StatusError struct {
	Method, URL string
	Status      int
	// Code is the error code read from the body (ErrorCodes.Path), or "".
	Code string
	// Body is the start of the response body.
	Body string
}

func (e *StatusError) Error() string {
	var b strings.Builder
	fmt.Fprintf(&b, "%s %s: HTTP %d", e.Method, e.URL, e.Status)
	if e.Code != "" {
		fmt.Fprintf(&b, " (code %s)", e.Code)
	}
	if e.Body != "" {
		fmt.Fprintf(&b, ": %s", e.Body)
	}
	return b.String()
}

// maxErrorBody bounds what is kept of an error body in StatusError.
const maxErrorBody = 256

// codeTable maps error codes to classes: exact codes, then prefixes.
type codeTable struct {
	exact    map[string]bool // code -> terminal
	prefixes []codePrefix    // longest first
}

type codePrefix struct {
	prefix   string
	terminal bool
}

// newCodeTable merges tables, later ones overriding earlier ones.
func newCodeTable(tables ...map[string]string) codeTable {
	merged := map[string]string{}
	for _, t := range tables {
		for k, v := range t {
			merged[k] = v
		}
	}
	ct := codeTable{exact: map[string]bool{}}
	for k, v := range merged {
		terminal := v == ClassTerminal
		if p, ok := strings.CutSuffix(k, "*"); ok {
			ct.prefixes = append(ct.prefixes, codePrefix{p, terminal})
		} else {
			ct.exact[k] = terminal
		}
	}
	// Longest prefix first; ties cannot happen (keys are unique).
	for i := 1; i < len(ct.prefixes); i++ {
		for j := i; j > 0 && len(ct.prefixes[j].prefix) > len(ct.prefixes[j-1].prefix); j-- {
			ct.prefixes[j], ct.prefixes[j-1] = ct.prefixes[j-1], ct.prefixes[j]
		}
	}
	return ct
}

// lookup returns whether code is terminal, and whether the table knows it.
func (ct codeTable) lookup(code string) (terminal, ok bool) {
	if code == "" {
		return false, false
	}
	if t, ok := ct.exact[code]; ok {
		return t, true
	}
	for _, p := range ct.prefixes {
		if strings.HasPrefix(code, p.prefix) {
			return p.terminal, true
		}
	}
	return false, false
}

// statusTerminal is the class of a status without a known error code:
// 408, 429 and 5xx are retryable, every other 3xx and 4xx is terminal
// (redirects are not followed).
func statusTerminal(status int) bool {
	switch {
	case status == http.StatusRequestTimeout, status == http.StatusTooManyRequests:
		return false
	case status >= 300 && status < 500:
		return true
	}
	return false
}

// classify turns a non-2xx response into a classified error. body is the
// start of the response body.
func (p *Publisher) classify(req *http.Request, resp *http.Response, body []byte) error {
	se := &StatusError{Method: req.Method, URL: redact(req), Status: resp.StatusCode}
	se.Code = codeAt(body, p.cfg.ErrorCodes.Path)
	if se.Code == "" && p.ably != nil {
		se.Code = resp.Header.Get("X-Ably-ErrorCode")
	}
	se.Body = string(bytes.TrimSpace(body[:min(len(body), maxErrorBody)]))
	terminal, ok := p.codes.lookup(se.Code)
	if !ok {
		terminal = statusTerminal(resp.StatusCode)
	}
	if terminal {
		return sink.Terminal(se)
	}
	if d, ok := parseRetryAfter(resp.Header.Get("Retry-After"), time.Now()); ok {
		return sink.WithRetryAfter(se, d)
	}
	return se
}

// codeAt reads the value at a dot-separated path of a JSON body as text
// ("40140", "rate_limited"), or "" when there is none.
func codeAt(body []byte, path string) string {
	if path == "" || len(body) == 0 {
		return ""
	}
	dec := json.NewDecoder(bytes.NewReader(body))
	dec.UseNumber()
	var v any
	if err := dec.Decode(&v); err != nil {
		return ""
	}
	for seg := range strings.SplitSeq(path, ".") {
		switch n := v.(type) {
		case map[string]any:
			v = n[seg]
		case []any:
			i, err := strconv.Atoi(seg)
			if err != nil || i < 0 || i >= len(n) {
				return ""
			}
			v = n[i]
		default:
			return ""
		}
	}
	switch c := v.(type) {
	case string:
		return c
	case json.Number:
		return c.String()
	case bool:
		return strconv.FormatBool(c)
	}
	return ""
}

// maxRetryAfter caps a server's Retry-After.
const maxRetryAfter = time.Hour

// parseRetryAfter reads a Retry-After value: delay seconds or an HTTP date.
func parseRetryAfter(v string, now time.Time) (time.Duration, bool) {
	v = strings.TrimSpace(v)
	if v == "" {
		return 0, false
	}
	var d time.Duration
	if secs, err := strconv.ParseInt(v, 10, 64); err == nil {
		if secs < 0 {
			return 0, false
		}
		d = time.Duration(min(secs, int64(maxRetryAfter/time.Second))) * time.Second
	} else if t, err := http.ParseTime(v); err == nil {
		d = t.Sub(now)
	} else {
		return 0, false
	}
	if d <= 0 {
		return 0, false
	}
	return min(d, maxRetryAfter), true
}

// redact is the request URL without user info or query (which may carry
// credentials), for error messages.
func redact(req *http.Request) string {
	u := *req.URL
	u.User = nil
	u.RawQuery = ""
	u.Fragment = ""
	return u.String()
}
