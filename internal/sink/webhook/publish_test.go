package webhook

import (
	"context"
	"encoding/pem"
	"errors"
	"fmt"
	"log/slog"
	"net"
	"net/http"
	"net/http/httptest"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/outbox-relay/outbox-relay/internal/sink"
)

func TestRequestShape(t *testing.T) {
	rc := newReceiver(t)
	p := newPublisher(t, Config{
		URL:     hookURL(rc.addr()),
		Method:  "put",
		Headers: map[string]string{"Authorization": "Bearer t0ken", "X-Team": "payments"},
	})
	dest := "shape-" + suffix()
	m := msg(dest, "42", "k", `{"a":1}`)
	m.Headers = append(m.Headers,
		sink.Header{Key: "aggregate_id", Value: []byte("order-7")},
		sink.Header{Key: "x-trace", Value: []byte("abc def")})
	m.Key = []byte("order 7/ü")
	bin := msg(dest, "43", "k", "\x00\x01binary")
	for i, err := range p.Publish(testCtx(t), []*sink.Message{m, bin}) {
		if err != nil {
			t.Fatalf("message %d: %v", i, err)
		}
	}
	got := rc.requests(dest)
	if len(got) != 2 {
		t.Fatalf("received %d requests, want 2", len(got))
	}
	// The two messages have different keys, so they may arrive in either
	// order.
	if got[0].Header.Get("Idempotency-Key") != "42" {
		got[0], got[1] = got[1], got[0]
	}
	r := got[0]
	checks := map[string]string{
		"Content-Type":          "application/json",
		"Idempotency-Key":       "42",
		"Authorization":         "Bearer t0ken",
		"X-Team":                "payments",
		"X-Outbox-Event-Id":     "42",
		"X-Outbox-Event-Type":   "order.created",
		"X-Outbox-Aggregate-Id": "order-7",
		"X-Outbox-X-Trace":      "abc def",
		"User-Agent":            userAgent,
		KeyHeader:               "order%207%2F%C3%BC",
	}
	for k, want := range checks {
		if v := r.Header.Get(k); v != want {
			t.Errorf("header %s = %q, want %q", k, v, want)
		}
	}
	if r.Method != http.MethodPut || string(r.Body) != `{"a":1}` {
		t.Errorf("request %s with body %q, want PUT with the payload", r.Method, r.Body)
	}
	if r.Header.Get(DefaultSignatureHeader) != "" {
		t.Error("signed without a secret")
	}
	if ct := got[1].Header.Get("Content-Type"); ct != "application/octet-stream" || string(got[1].Body) != "\x00\x01binary" {
		t.Errorf("binary payload sent as %q, body %q", ct, got[1].Body)
	}
}

func TestContentTypeOverride(t *testing.T) {
	rc := newReceiver(t)
	p := newPublisher(t, Config{URL: hookURL(rc.addr()), ContentType: "application/cloudevents+json"})
	dest := "ct-" + suffix()
	if err := p.Publish(testCtx(t), []*sink.Message{msg(dest, "1", "", "not json")})[0]; err != nil {
		t.Fatal(err)
	}
	if ct := rc.requests(dest)[0].Header.Get("Content-Type"); ct != "application/cloudevents+json" {
		t.Fatalf("Content-Type = %q", ct)
	}
}

func TestUnsendableMessagesAreTerminal(t *testing.T) {
	rc := newReceiver(t)
	p := newPublisher(t, Config{URL: hookURL(rc.addr()), MaxMessageBytes: 16})
	dest := "bad-" + suffix()
	badName := msg(dest, "2", "", "{}")
	badName.Headers = append(badName.Headers, sink.Header{Key: "has space", Value: []byte("v")})
	badValue := msg(dest, "3", "", "{}")
	badValue.Headers = append(badValue.Headers, sink.Header{Key: "note", Value: []byte("line1\nline2")})
	msgs := []*sink.Message{
		msg(dest, "1", "", strings.Repeat("x", 17)),
		badName,
		badValue,
		msg("", "4", "", "{}"),
		msg(dest, "5", "", "{}"),
	}
	errs := p.Publish(testCtx(t), msgs)
	for i := range 4 {
		if !sink.IsTerminal(errs[i]) {
			t.Errorf("message %d: %v, want terminal", i, errs[i])
		}
	}
	if errs[4] != nil {
		t.Fatalf("good message: %v", errs[4])
	}
	if n := len(rc.requests(dest)); n != 1 {
		t.Fatalf("server received %d requests, want only the good one", n)
	}
}

// TestFailureStopsItsKey: once a message of a key fails, the rest of that
// key in the call are not sent and come back retryable, while other keys
// go on.
func TestFailureStopsItsKey(t *testing.T) {
	rc := newReceiver(t)
	rc.setRespond(func(w http.ResponseWriter, r *http.Request, _ []byte) bool {
		if r.Header.Get("Idempotency-Key") == "a2" {
			http.Error(w, "boom", http.StatusInternalServerError)
			return true
		}
		return false
	})
	p := newPublisher(t, Config{URL: hookURL(rc.addr())})
	dest := "stop-" + suffix()
	var msgs []*sink.Message
	for i := range 5 {
		msgs = append(msgs, msg(dest, fmt.Sprintf("a%d", i), "A", "{}"), msg(dest, fmt.Sprintf("b%d", i), "B", "{}"))
	}
	errs := p.Publish(testCtx(t), msgs)
	for i, m := range msgs {
		failed := m.ID == "a2" || m.ID == "a3" || m.ID == "a4"
		if (errs[i] != nil) != failed {
			t.Fatalf("message %s: %v (want failed=%v)", m.ID, errs[i], failed)
		}
		if failed && sink.IsTerminal(errs[i]) {
			t.Fatalf("message %s: terminal %v", m.ID, errs[i])
		}
		if (m.ID == "a3" || m.ID == "a4") && !errors.Is(errs[i], errNotSent) {
			t.Fatalf("message %s: %v, want not sent", m.ID, errs[i])
		}
	}
	var ids []string
	for _, r := range rc.requests(dest) {
		ids = append(ids, r.Header.Get("Idempotency-Key"))
	}
	for _, id := range ids {
		if id == "a3" || id == "a4" {
			t.Fatalf("%s was sent after a2 failed (received %v)", id, ids)
		}
	}
	if len(ids) != 7 {
		t.Fatalf("received %v, want a0, a1 and b0..b4", ids)
	}
}

// TestConcurrencyBound: keys go concurrently, never more than Concurrency
// requests at once, even across Publish calls.
func TestConcurrencyBound(t *testing.T) {
	rc := newReceiver(t)
	var inFlight, peak atomic.Int64
	rc.setRespond(func(w http.ResponseWriter, r *http.Request, _ []byte) bool {
		n := inFlight.Add(1)
		defer inFlight.Add(-1)
		for {
			old := peak.Load()
			if n <= old || peak.CompareAndSwap(old, n) {
				break
			}
		}
		time.Sleep(20 * time.Millisecond)
		w.WriteHeader(http.StatusNoContent)
		return true
	})
	p := newPublisher(t, Config{URL: hookURL(rc.addr()), Concurrency: 3})
	var wg sync.WaitGroup
	for c := range 2 {
		wg.Go(func() {
			var msgs []*sink.Message
			for k := range 12 {
				msgs = append(msgs, msg("d", fmt.Sprintf("%d-%d", c, k), fmt.Sprintf("key-%d-%d", c, k), "{}"))
			}
			for i, err := range p.Publish(testCtx(t), msgs) {
				if err != nil {
					t.Errorf("call %d message %d: %v", c, i, err)
				}
			}
		})
	}
	wg.Wait()
	if got := peak.Load(); got != 3 {
		t.Fatalf("peak concurrent requests = %d, want 3", got)
	}
}

func TestTimeout(t *testing.T) {
	rc := newReceiver(t)
	release := make(chan struct{})
	t.Cleanup(func() { close(release) })
	rc.setRespond(func(w http.ResponseWriter, r *http.Request, _ []byte) bool {
		if r.Header.Get("Idempotency-Key") == "slow" {
			select {
			case <-release:
			case <-r.Context().Done():
			}
		}
		return false
	})
	p := newPublisher(t, Config{URL: hookURL(rc.addr()), Timeout: 200 * time.Millisecond})
	dest := "timeout-" + suffix()
	start := time.Now()
	errs := p.Publish(testCtx(t), []*sink.Message{msg(dest, "slow", "k1", "{}"), msg(dest, "fast", "k2", "{}")})
	took := time.Since(start)
	if errs[0] == nil || sink.IsTerminal(errs[0]) || !errors.Is(errs[0], context.DeadlineExceeded) {
		t.Fatalf("slow request: %v, want a retryable deadline error", errs[0])
	}
	if errs[1] != nil {
		t.Fatalf("another key waited on the slow one: %v", errs[1])
	}
	if took > 3*time.Second {
		t.Fatalf("Publish took %v with a 200ms timeout", took)
	}
}

func TestClosedPublisher(t *testing.T) {
	rc := newReceiver(t)
	p := newPublisher(t, Config{URL: hookURL(rc.addr())})
	if err := p.Close(context.Background()); err != nil {
		t.Fatal(err)
	}
	err := p.Publish(testCtx(t), []*sink.Message{msg("d", "1", "", "{}")})[0]
	if !errors.Is(err, ErrClosed) || sink.IsTerminal(err) {
		t.Fatalf("publish after close: %v, want retryable ErrClosed", err)
	}
}

func TestURLTemplate(t *testing.T) {
	tests := []struct {
		tmpl, dest, want string
		terminal         bool
	}{
		{"https://h/hooks/{destination}", "orders", "https://h/hooks/orders", false},
		{"https://h/hooks/{destination}/in", "a b/c?d", "https://h/hooks/a%20b%2Fc%3Fd/in", false},
		{"https://h/hooks/{destination}", "tenant:42", "https://h/hooks/tenant:42", false},
		{"https://h/hooks/{destination}/in", "..", "https://h/hooks/%2E%2E/in", false},
		{"https://h/in?topic={destination}", "a b&c", "https://h/in?topic=a+b%26c", false},
		{"https://h/{destination}?t={destination}", "x/y", "https://h/x%2Fy?t=x%2Fy", false},
		{"https://h/fixed", "", "https://h/fixed", false},
		{"https://h/hooks/{destination}", "", "", true},
		{"{destination}", "https://other.example/hook?x=1", "https://other.example/hook?x=1", false},
		{"{destination}", "orders", "", true},
		{"{destination}", "ftp://h/x", "", true},
		{"{destination}", "http:///nohost", "", true},
	}
	for _, tt := range tests {
		got, err := parseTemplate(tt.tmpl).render(tt.dest)
		if tt.terminal {
			if !sink.IsTerminal(err) {
				t.Errorf("%s with %q: %q, %v; want a terminal error", tt.tmpl, tt.dest, got, err)
			}
			continue
		}
		if err != nil || got != tt.want {
			t.Errorf("%s with %q = %q, %v; want %q", tt.tmpl, tt.dest, got, err, tt.want)
		}
	}
}

func TestWholeURLDestination(t *testing.T) {
	rc := newReceiver(t)
	p := newPublisher(t, Config{URL: "{destination}"})
	dest := "whole-" + suffix()
	errs := p.Publish(testCtx(t), []*sink.Message{
		msg("http://"+rc.addr()+"/hooks/"+dest, "1", "", "{}"),
		msg("not a url", "2", "", "{}"),
	})
	if errs[0] != nil || !sink.IsTerminal(errs[1]) {
		t.Fatalf("results %v, %v; want success then terminal", errs[0], errs[1])
	}
	if len(rc.requests(dest)) != 1 {
		t.Fatal("the whole-URL destination was not used")
	}
	if err := p.Ping(testCtx(t)); err != nil {
		t.Fatalf("ping without a fixed host: %v", err)
	}
}

func TestPing(t *testing.T) {
	rc := newReceiver(t)
	p := newPublisher(t, Config{URL: hookURL(rc.addr())})
	// The receiver answers HEAD / with 404: still a server that answers.
	if err := p.Ping(testCtx(t)); err != nil {
		t.Fatalf("ping: %v", err)
	}
	rc.srv.Close()
	if err := p.Ping(testCtx(t)); err == nil {
		t.Fatal("ping succeeded with the server down")
	}
}

func TestTLS(t *testing.T) {
	srv := httptest.NewTLSServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		w.WriteHeader(http.StatusAccepted)
	}))
	t.Cleanup(srv.Close)
	ca := filepath.Join(t.TempDir(), "ca.pem")
	pemBytes := pem.EncodeToMemory(&pem.Block{Type: "CERTIFICATE", Bytes: srv.Certificate().Raw})
	if err := os.WriteFile(ca, pemBytes, 0o600); err != nil {
		t.Fatal(err)
	}
	m := []*sink.Message{msg("d", "1", "", "{}")}
	untrusted := newPublisher(t, Config{URL: srv.URL + "/{destination}"})
	if err := untrusted.Publish(testCtx(t), m)[0]; err == nil || sink.IsTerminal(err) {
		t.Fatalf("unknown certificate authority: %v, want a retryable error", err)
	}
	trusted := newPublisher(t, Config{URL: srv.URL + "/{destination}", TLS: TLS{CAFile: ca}})
	if err := trusted.Publish(testCtx(t), m)[0]; err != nil {
		t.Fatalf("with tls.ca_file: %v", err)
	}
	insecure := newPublisher(t, Config{URL: srv.URL + "/{destination}", TLS: TLS{InsecureSkipVerify: true}})
	if err := insecure.Publish(testCtx(t), m)[0]; err != nil {
		t.Fatalf("with tls.insecure_skip_verify: %v", err)
	}
}

// TestKeepAlive: requests reuse connections instead of dialling one each.
func TestKeepAlive(t *testing.T) {
	var conns atomic.Int64
	srv := httptest.NewUnstartedServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		w.WriteHeader(http.StatusNoContent)
	}))
	srv.Config.ConnState = func(_ net.Conn, s http.ConnState) {
		if s == http.StateNew {
			conns.Add(1)
		}
	}
	srv.Start()
	t.Cleanup(srv.Close)
	p := newPublisher(t, Config{URL: srv.URL + "/{destination}", Concurrency: 4})
	for b := range 3 {
		var msgs []*sink.Message
		for i := range 50 {
			msgs = append(msgs, msg("d", fmt.Sprintf("%d-%d", b, i), fmt.Sprintf("k%d", i%8), "{}"))
		}
		for i, err := range p.Publish(testCtx(t), msgs) {
			if err != nil {
				t.Fatalf("batch %d message %d: %v", b, i, err)
			}
		}
	}
	if n := conns.Load(); n > 8 {
		t.Fatalf("150 requests with concurrency 4 opened %d connections", n)
	}
}

func TestLogsRefusals(t *testing.T) {
	rc := newReceiver(t)
	var buf syncBuffer
	p, err := New(Config{URL: hookURL(rc.addr())}, WithLogger(slog.New(slog.NewTextHandler(&buf, &slog.HandlerOptions{Level: slog.LevelDebug}))))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = p.Close(context.Background()) })
	if err := p.Publish(testCtx(t), []*sink.Message{msg("gone-x", "77", "", "{}")})[0]; !sink.IsTerminal(err) {
		t.Fatalf("404: %v", err)
	}
	out := buf.String()
	for _, want := range []string{"message_id=77", "status=404", "terminal=true"} {
		if !strings.Contains(out, want) {
			t.Errorf("log %q lacks %s", out, want)
		}
	}
}

type syncBuffer struct {
	mu sync.Mutex
	b  strings.Builder
}

func (s *syncBuffer) Write(p []byte) (int, error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.b.Write(p)
}

func (s *syncBuffer) String() string {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.b.String()
}
