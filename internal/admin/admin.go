// Package admin serves the relay's operational HTTP endpoints:
//
//	GET /metrics  Prometheus metrics from the given registry
//	GET /healthz  200 "ok" while the process runs (liveness)
//	GET /readyz   200 when every readiness check passes, else 503 (readiness)
//	GET /health   the same as /readyz
//	GET /         the console, and /api/ the JSON admin API (see WithAPI)
//
// /readyz answers with a JSON body such as
//
//	{"status":"ok","checks":[{"name":"postgres","ok":true}]}
//
// or, when some checks fail, status 503 and only the failing ones:
//
//	{"status":"unavailable","checks":[{"name":"postgres","ok":false,"error":"..."}]}
package admin

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"log/slog"
	"net"
	"net/http"
	"slices"
	"strings"
	"sync"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/promhttp"
)

// ReadyFunc runs the readiness checks and returns each one's outcome by
// name: a nil error means that check passes. It should return promptly once
// ctx is done; the server gives it ReadyTimeout.
type ReadyFunc func(ctx context.Context) map[string]error

// Timeouts of the server.
const (
	// ReadyTimeout bounds one call of the ReadyFunc.
	ReadyTimeout = 5 * time.Second
	// ShutdownTimeout bounds the wait for in-flight requests on shutdown.
	ShutdownTimeout = 10 * time.Second
)

// Server is the admin HTTP server. Create it with New and start it with Run.
type Server struct {
	addr   string
	ready  ReadyFunc
	logger *slog.Logger
	http   *http.Server
	mux    *http.ServeMux
	api    API    // nil: no console nor admin API
	token  string // guards the API's changes

	mu      sync.Mutex
	ln      net.Listener
	running bool
}

// New returns a server that will listen on addr (":0" picks a free port;
// see Listen and Addr). It serves reg on /metrics; registering the Go and
// process collectors there is the caller's choice. ready may be nil, meaning
// always ready; a nil reg serves no metrics and a nil logger logs nothing.
func New(addr string, reg *prometheus.Registry, ready ReadyFunc, logger *slog.Logger) *Server {
	if reg == nil {
		reg = prometheus.NewRegistry()
	}
	if logger == nil {
		logger = slog.New(slog.DiscardHandler)
	}
	s := &Server{addr: addr, ready: ready, logger: logger}

	mux := http.NewServeMux()
	s.mux = mux
	mux.Handle("GET /metrics", promhttp.HandlerFor(reg, promhttp.HandlerOpts{
		ErrorLog:      slog.NewLogLogger(logger.Handler(), slog.LevelError),
		ErrorHandling: promhttp.ContinueOnError,
	}))
	mux.HandleFunc("GET /healthz", func(w http.ResponseWriter, _ *http.Request) {
		w.Header().Set("Content-Type", "text/plain; charset=utf-8")
		_, _ = w.Write([]byte("ok\n"))
	})
	mux.HandleFunc("GET /readyz", s.serveReady)
	// /health is /readyz under the name runbooks use.
	mux.HandleFunc("GET /health", s.serveReady)

	s.http = &http.Server{
		Handler:           mux,
		ReadHeaderTimeout: 5 * time.Second,
		IdleTimeout:       time.Minute,
		ErrorLog:          slog.NewLogLogger(logger.Handler(), slog.LevelWarn),
	}
	return s
}

// Handler returns the server's routes, for use without a listener.
func (s *Server) Handler() http.Handler { return s.http.Handler }

// Listen binds the listening socket if that has not been done yet. Run calls
// it; call it first to learn the bound address from Addr before Run.
func (s *Server) Listen() error {
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.ln != nil {
		return nil
	}
	ln, err := net.Listen("tcp", s.addr)
	if err != nil {
		return fmt.Errorf("admin: listen on %s: %w", s.addr, err)
	}
	s.ln = ln
	return nil
}

// Addr returns the address the server listens on once Listen (or Run) has
// bound it, such as "127.0.0.1:43567" for ":0"; before that, the configured
// address.
func (s *Server) Addr() string {
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.ln != nil {
		return s.ln.Addr().String()
	}
	return s.addr
}

// Run listens (unless Listen already did) and serves until ctx is done, then
// shuts down gracefully, letting in-flight requests finish for up to
// ShutdownTimeout. It returns nil after a shutdown caused by ctx, and an error
// if the server cannot listen or fails. A Server runs at most once.
func (s *Server) Run(ctx context.Context) error {
	s.mu.Lock()
	if s.running {
		s.mu.Unlock()
		return errors.New("admin: server already run")
	}
	s.running = true
	s.mu.Unlock()

	if err := s.Listen(); err != nil {
		return err
	}
	s.logger.Info("admin server listening", "addr", s.Addr())

	served := make(chan error, 1)
	go func() { served <- s.http.Serve(s.ln) }()

	select {
	case err := <-served:
		return fmt.Errorf("admin: serve: %w", err)
	case <-ctx.Done():
	}

	shutdownCtx, cancel := context.WithTimeout(context.WithoutCancel(ctx), ShutdownTimeout)
	defer cancel()
	err := s.http.Shutdown(shutdownCtx)
	if serr := <-served; !errors.Is(serr, http.ErrServerClosed) {
		s.logger.Warn("admin server stopped serving", "err", serr)
	}
	if err != nil {
		_ = s.http.Close()
		return fmt.Errorf("admin: shutdown: %w", err)
	}
	s.logger.Info("admin server stopped")
	return nil
}

// checkResult is one readiness check in the /readyz body.
type checkResult struct {
	Name  string `json:"name"`
	OK    bool   `json:"ok"`
	Error string `json:"error,omitempty"`
}

// readyBody is the /readyz response.
type readyBody struct {
	Status string        `json:"status"`
	Checks []checkResult `json:"checks"`
}

func (s *Server) serveReady(w http.ResponseWriter, r *http.Request) {
	var results map[string]error
	if s.ready != nil {
		ctx, cancel := context.WithTimeout(r.Context(), ReadyTimeout)
		results = s.ready(ctx)
		cancel()
	}

	passed := []checkResult{}
	var failed []checkResult
	for name, err := range results {
		if err == nil {
			passed = append(passed, checkResult{Name: name, OK: true})
		} else {
			failed = append(failed, checkResult{Name: name, Error: err.Error()})
		}
	}

	body, code := readyBody{Status: "ok", Checks: passed}, http.StatusOK
	if len(failed) > 0 {
		body, code = readyBody{Status: "unavailable", Checks: failed}, http.StatusServiceUnavailable
	}
	slices.SortFunc(body.Checks, func(a, b checkResult) int { return strings.Compare(a.Name, b.Name) })
	if len(failed) > 0 {
		named := make([]string, len(failed))
		for i, c := range body.Checks {
			named[i] = c.Name + ": " + c.Error
		}
		s.logger.Warn("not ready", "failed", strings.Join(named, "; "))
	}

	w.Header().Set("Content-Type", "application/json")
	w.Header().Set("Cache-Control", "no-store")
	w.WriteHeader(code)
	_ = json.NewEncoder(w).Encode(body)
}
