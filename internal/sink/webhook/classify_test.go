package webhook

import (
	"errors"
	"net/http"
	"strings"
	"testing"
	"time"

	"github.com/outbox-relay/outbox-relay/internal/sink"
)

// answerWith makes rc answer every request with status, extra headers and
// body.
func answerWith(rc *receiver, status int, header map[string]string, body string) {
	rc.setRespond(func(w http.ResponseWriter, r *http.Request, _ []byte) bool {
		for k, v := range header {
			w.Header().Set(k, v)
		}
		w.WriteHeader(status)
		_, _ = w.Write([]byte(body))
		return true
	})
}

func TestStatusClassification(t *testing.T) {
	rc := newReceiver(t)
	p := newPublisher(t, Config{URL: hookURL(rc.addr())})
	past := time.Now().Add(-time.Hour).UTC().Format(http.TimeFormat)
	future := time.Now().Add(90 * time.Second).UTC().Format(http.TimeFormat)
	tests := []struct {
		status     int
		retryAfter string
		terminal   bool
		wantDelay  time.Duration // 0: none; else at least this much
	}{
		{http.StatusOK, "", false, 0},
		{http.StatusBadRequest, "", true, 0},
		{http.StatusUnauthorized, "", true, 0},
		{http.StatusNotFound, "", true, 0},
		{http.StatusUnprocessableEntity, "", true, 0},
		{http.StatusMovedPermanently, "", true, 0},
		{http.StatusTemporaryRedirect, "", true, 0},
		{http.StatusRequestTimeout, "", false, 0},
		{http.StatusTooManyRequests, "7", false, 7 * time.Second},
		{http.StatusServiceUnavailable, future, false, 80 * time.Second},
		{http.StatusServiceUnavailable, past, false, 0},
		{http.StatusInternalServerError, "", false, 0},
		{http.StatusBadGateway, "soon", false, 0},
		// A Retry-After on a terminal answer is not a reason to retry.
		{http.StatusBadRequest, "5", true, 0},
	}
	for _, tt := range tests {
		t.Run(http.StatusText(tt.status)+"/"+tt.retryAfter, func(t *testing.T) {
			h := map[string]string{"Location": "http://" + rc.addr() + "/elsewhere"}
			if tt.retryAfter != "" {
				h["Retry-After"] = tt.retryAfter
			}
			answerWith(rc, tt.status, h, "")
			err := p.Publish(testCtx(t), []*sink.Message{msg("d", "1", "", "{}")})[0]
			if tt.status == http.StatusOK {
				if err != nil {
					t.Fatalf("200: %v", err)
				}
				return
			}
			if err == nil {
				t.Fatalf("HTTP %d reported as success", tt.status)
			}
			if sink.IsTerminal(err) != tt.terminal {
				t.Fatalf("HTTP %d: terminal = %v, want %v (%v)", tt.status, sink.IsTerminal(err), tt.terminal, err)
			}
			var se *StatusError
			if !errors.As(err, &se) || se.Status != tt.status {
				t.Fatalf("HTTP %d: error %v does not carry the status", tt.status, err)
			}
			d, ok := sink.RetryAfter(err)
			if tt.wantDelay == 0 {
				if ok {
					t.Fatalf("HTTP %d: unexpected retry-after %v", tt.status, d)
				}
				return
			}
			if !ok || d < tt.wantDelay || d > tt.wantDelay+15*time.Second {
				t.Fatalf("HTTP %d: retry-after = %v, %v; want about %v", tt.status, d, ok, tt.wantDelay)
			}
		})
	}
}

func TestErrorCodes(t *testing.T) {
	rc := newReceiver(t)
	p := newPublisher(t, Config{
		URL: hookURL(rc.addr()),
		ErrorCodes: ErrorCodes{Path: "error.code", Codes: map[string]string{
			"duplicate_event": ClassTerminal,
			"busy":            ClassRetryable,
			"42*":             ClassRetryable,
			"4242":            ClassTerminal,
		}},
	})
	tests := []struct {
		name     string
		status   int
		body     string
		terminal bool
		code     string
	}{
		{"code makes a 5xx terminal", 500, `{"error":{"code":"duplicate_event"}}`, true, "duplicate_event"},
		{"code makes a 4xx retryable", 400, `{"error":{"code":"busy","message":"try later"}}`, false, "busy"},
		{"numeric code by prefix", 422, `{"error":{"code":4201}}`, false, "4201"},
		{"exact code beats prefix", 503, `{"error":{"code":4242}}`, true, "4242"},
		{"unknown code falls back to status", 400, `{"error":{"code":"other"}}`, true, "other"},
		{"unknown code on 5xx", 502, `{"error":{"code":"other"}}`, false, "other"},
		{"no JSON body", 400, `busy`, true, ""},
		{"code elsewhere", 500, `{"code":"duplicate_event"}`, false, ""},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			answerWith(rc, tt.status, map[string]string{"Content-Type": "application/json"}, tt.body)
			err := p.Publish(testCtx(t), []*sink.Message{msg("d", "1", "", "{}")})[0]
			if err == nil {
				t.Fatal("failure reported as success")
			}
			if sink.IsTerminal(err) != tt.terminal {
				t.Fatalf("terminal = %v, want %v (%v)", sink.IsTerminal(err), tt.terminal, err)
			}
			var se *StatusError
			if !errors.As(err, &se) || se.Code != tt.code {
				t.Fatalf("code = %q, want %q (%v)", se.Code, tt.code, err)
			}
			if !strings.Contains(err.Error(), "HTTP") {
				t.Fatalf("error does not name the status: %v", err)
			}
		})
	}
}

func TestCodeAt(t *testing.T) {
	tests := []struct{ body, path, want string }{
		{`{"error":{"code":40140}}`, "error.code", "40140"},
		{`{"errors":[{"code":"E1"}]}`, "errors.0.code", "E1"},
		{`{"errors":[{"code":"E1"}]}`, "errors.1.code", ""},
		{`{"ok":false}`, "ok", "false"},
		{`{"error":"text"}`, "error.code", ""},
		{`{"error":{"code":{"nested":1}}}`, "error.code", ""},
		{`not json`, "error.code", ""},
		{`{"error":{"code":1}}`, "", ""},
	}
	for _, tt := range tests {
		if got := codeAt([]byte(tt.body), tt.path); got != tt.want {
			t.Errorf("codeAt(%s, %q) = %q, want %q", tt.body, tt.path, got, tt.want)
		}
	}
}

func TestParseRetryAfter(t *testing.T) {
	now := time.Date(2026, 1, 2, 3, 4, 5, 0, time.UTC)
	tests := []struct {
		v    string
		want time.Duration
		ok   bool
	}{
		{"120", 2 * time.Minute, true},
		{" 3 ", 3 * time.Second, true},
		{"0", 0, false},
		{"-1", 0, false},
		{"999999999", maxRetryAfter, true},
		{now.Add(30 * time.Second).Format(http.TimeFormat), 30 * time.Second, true},
		{now.Add(-time.Second).Format(http.TimeFormat), 0, false},
		{"tomorrow", 0, false},
		{"", 0, false},
	}
	for _, tt := range tests {
		got, ok := parseRetryAfter(tt.v, now)
		if got != tt.want || ok != tt.ok {
			t.Errorf("parseRetryAfter(%q) = %v, %v; want %v, %v", tt.v, got, ok, tt.want, tt.ok)
		}
	}
}
