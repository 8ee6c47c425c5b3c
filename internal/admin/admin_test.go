package admin

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"io"
	"log/slog"
	"net"
	"net/http"
	"net/http/httptest"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus"

	"github.com/outbox-relay/outbox-relay/internal/metrics"
)

// get performs a GET against the server's handler without a listener.
func get(t *testing.T, s *Server, path string) *httptest.ResponseRecorder {
	t.Helper()
	rec := httptest.NewRecorder()
	s.Handler().ServeHTTP(rec, httptest.NewRequest(http.MethodGet, path, nil))
	return rec
}

func decodeReady(t *testing.T, rec *httptest.ResponseRecorder) readyBody {
	t.Helper()
	if ct := rec.Header().Get("Content-Type"); ct != "application/json" {
		t.Errorf("Content-Type %q, want application/json", ct)
	}
	var body readyBody
	if err := json.Unmarshal(rec.Body.Bytes(), &body); err != nil {
		t.Fatalf("decode %q: %v", rec.Body.String(), err)
	}
	return body
}

func TestHealthz(t *testing.T) {
	rec := get(t, New(":0", nil, nil, nil), "/healthz")
	if rec.Code != http.StatusOK || strings.TrimSpace(rec.Body.String()) != "ok" {
		t.Errorf("got %d %q, want 200 ok", rec.Code, rec.Body.String())
	}
}

func TestReadyzAllPass(t *testing.T) {
	ready := func(context.Context) map[string]error {
		return map[string]error{"sink": nil, "postgres": nil}
	}
	rec := get(t, New(":0", nil, ready, nil), "/readyz")
	if rec.Code != http.StatusOK {
		t.Fatalf("status %d, want 200; body %s", rec.Code, rec.Body.String())
	}
	body := decodeReady(t, rec)
	want := []checkResult{{Name: "postgres", OK: true}, {Name: "sink", OK: true}}
	if body.Status != "ok" || len(body.Checks) != 2 || body.Checks[0] != want[0] || body.Checks[1] != want[1] {
		t.Errorf("body %+v, want status ok and checks %+v", body, want)
	}
}

func TestReadyzFailing(t *testing.T) {
	ready := func(context.Context) map[string]error {
		return map[string]error{
			"postgres": nil,
			"sink":     errors.New("broker unreachable"),
			"lease":    errors.New("not leader"),
		}
	}
	var logs bytes.Buffer
	rec := get(t, New(":0", nil, ready, slog.New(slog.NewTextHandler(&logs, nil))), "/readyz")
	if rec.Code != http.StatusServiceUnavailable {
		t.Fatalf("status %d, want 503", rec.Code)
	}
	if !strings.Contains(logs.String(), `msg="not ready" failed="lease: not leader; sink: broker unreachable"`) {
		t.Errorf("logged %q: want each failed check named", logs.String())
	}
	body := decodeReady(t, rec)
	want := []checkResult{
		{Name: "lease", Error: "not leader"},
		{Name: "sink", Error: "broker unreachable"},
	}
	if body.Status != "unavailable" || len(body.Checks) != 2 || body.Checks[0] != want[0] || body.Checks[1] != want[1] {
		t.Errorf("body %+v, want status unavailable and checks %+v", body, want)
	}
}

func TestReadyzNoChecks(t *testing.T) {
	rec := get(t, New(":0", nil, nil, nil), "/readyz")
	if rec.Code != http.StatusOK {
		t.Fatalf("status %d, want 200", rec.Code)
	}
	if got := strings.TrimSpace(rec.Body.String()); got != `{"status":"ok","checks":[]}` {
		t.Errorf("body %s", got)
	}
}

func TestReadyzGivesDeadline(t *testing.T) {
	var deadline time.Time
	ready := func(ctx context.Context) map[string]error {
		deadline, _ = ctx.Deadline()
		return nil
	}
	get(t, New(":0", nil, ready, nil), "/readyz")
	if left := time.Until(deadline); left <= 0 || left > ReadyTimeout {
		t.Errorf("ready called with %v left, want (0, %v]", left, ReadyTimeout)
	}
}

func TestMetrics(t *testing.T) {
	reg := prometheus.NewRegistry()
	metrics.New(reg).Source("orders").Published.Add(2)

	rec := get(t, New(":0", reg, nil, nil), "/metrics")
	if rec.Code != http.StatusOK {
		t.Fatalf("status %d, want 200", rec.Code)
	}
	if want := `outbox_relay_events_published_total{source="orders"} 2`; !strings.Contains(rec.Body.String(), want) {
		t.Errorf("metrics output lacks %q:\n%s", want, rec.Body.String())
	}
}

func TestUnknownPath(t *testing.T) {
	if rec := get(t, New(":0", nil, nil, nil), "/nope"); rec.Code != http.StatusNotFound {
		t.Errorf("status %d, want 404", rec.Code)
	}
}

// TestRunServesAndShutsDown runs the server on a real loopback port.
func TestRunServesAndShutsDown(t *testing.T) {
	reg := prometheus.NewRegistry()
	metrics.New(reg).Source("orders")
	var failing atomic.Bool
	failing.Store(true)
	ready := func(context.Context) map[string]error {
		if failing.Load() {
			return map[string]error{"postgres": errors.New("down")}
		}
		return map[string]error{"postgres": nil}
	}
	s := New("127.0.0.1:0", reg, ready, nil)
	if err := s.Listen(); err != nil {
		t.Fatal(err)
	}
	addr := s.Addr()
	if strings.HasSuffix(addr, ":0") {
		t.Fatalf("Addr() = %s, want the bound port", addr)
	}

	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan error, 1)
	go func() { done <- s.Run(ctx) }()

	fetch := func(path string) (int, string) {
		t.Helper()
		resp, err := http.Get("http://" + addr + path)
		if err != nil {
			t.Fatal(err)
		}
		defer resp.Body.Close()
		b, err := io.ReadAll(resp.Body)
		if err != nil {
			t.Fatal(err)
		}
		return resp.StatusCode, string(b)
	}

	if code, body := fetch("/healthz"); code != http.StatusOK || body != "ok\n" {
		t.Errorf("/healthz: %d %q", code, body)
	}
	if code, _ := fetch("/readyz"); code != http.StatusServiceUnavailable {
		t.Errorf("/readyz while failing: %d, want 503", code)
	}
	failing.Store(false)
	if code, _ := fetch("/readyz"); code != http.StatusOK {
		t.Errorf("/readyz when passing: %d, want 200", code)
	}
	if code, body := fetch("/metrics"); code != http.StatusOK || !strings.Contains(body, "outbox_relay_pending_events") {
		t.Errorf("/metrics: %d, body lacks outbox_relay_pending_events", code)
	}

	cancel()
	select {
	case err := <-done:
		if err != nil {
			t.Fatalf("Run after cancel: %v", err)
		}
	case <-time.After(ShutdownTimeout + time.Second):
		t.Fatal("Run did not return after cancel")
	}
	if conn, err := net.DialTimeout("tcp", addr, time.Second); err == nil {
		conn.Close()
		t.Error("still accepting connections after shutdown")
	}
	if err := s.Run(context.Background()); err == nil {
		t.Error("second Run succeeded")
	}
}

func TestRunListenError(t *testing.T) {
	taken, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	defer taken.Close()

	s := New(taken.Addr().String(), nil, nil, nil)
	if err := s.Run(context.Background()); err == nil {
		t.Fatal("Run on a taken address succeeded")
	}
}

// TestShutdownWaitsForInflight checks that a request in progress when Run's
// context is done still finishes.
func TestShutdownWaitsForInflight(t *testing.T) {
	entered, release := make(chan struct{}), make(chan struct{})
	ready := func(context.Context) map[string]error {
		close(entered)
		<-release
		return nil
	}
	s := New("127.0.0.1:0", nil, ready, nil)
	if err := s.Listen(); err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan error, 1)
	go func() { done <- s.Run(ctx) }()

	status := make(chan int, 1)
	go func() {
		resp, err := http.Get("http://" + s.Addr() + "/readyz")
		if err != nil {
			status <- 0
			return
		}
		resp.Body.Close()
		status <- resp.StatusCode
	}()

	<-entered
	cancel()
	select {
	case err := <-done:
		t.Fatalf("Run returned (%v) while a request was in flight", err)
	case <-time.After(100 * time.Millisecond):
	}
	close(release)
	if code := <-status; code != http.StatusOK {
		t.Errorf("in-flight request got %d, want 200", code)
	}
	if err := <-done; err != nil {
		t.Errorf("Run: %v", err)
	}
}
