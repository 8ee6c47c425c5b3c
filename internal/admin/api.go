package admin

import (
	"context"
	"crypto/subtle"
	"embed"
	"encoding/json"
	"errors"
	"io/fs"
	"net/http"
	"strconv"
	"strings"
	"time"
)

// API is what the console and the JSON admin API read and change. Reads
// are open to whoever reaches the admin listener; changes need the bearer
// token.
type API interface {
	// Sources describes every source (see outbox-relay status).
	Sources(ctx context.Context) (any, error)
	// DeadLetters lists dead letters not replayed, newest first.
	DeadLetters(ctx context.Context, f DeadFilter) (any, error)
	// Replay puts the dead letters with these ids back into their tables'
	// pending sets, audited under actor.
	Replay(ctx context.Context, ids []string, actor string) (int, error)
	// Purge deletes the dead letters with these ids, audited under actor.
	Purge(ctx context.Context, ids []string, actor string) (int, error)
}

// DeadFilter selects dead letters in the API.
type DeadFilter struct {
	Source, EventType, Reason string
	Since                     time.Time
	Limit                     int
}

//go:embed console
var console embed.FS

// WithAPI serves the console at / and the JSON API under /api/. token
// guards the changes; empty, they are refused.
func (s *Server) WithAPI(api API, token string) *Server {
	s.api, s.token = api, token
	sub, _ := fs.Sub(console, "console")
	s.mux.Handle("GET /{$}", consoleHeaders(http.FileServerFS(sub)))
	s.mux.Handle("GET /console/", consoleHeaders(http.StripPrefix("/console/", http.FileServerFS(sub))))
	s.mux.HandleFunc("GET /api/sources", s.apiSources)
	s.mux.HandleFunc("GET /api/dead-letters", s.apiDeadLetters)
	s.mux.HandleFunc("POST /api/dead-letters/replay", s.authorized(s.change("replayed", s.api.Replay)))
	s.mux.HandleFunc("POST /api/dead-letters/purge", s.authorized(s.change("purged", s.api.Purge)))
	return s
}

// consoleHeaders keeps the console to its own files and out of other
// sites' frames, where a click could be borrowed.
func consoleHeaders(h http.Handler) http.Handler {
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		w.Header().Set("Content-Security-Policy", "default-src 'self'; frame-ancestors 'none'")
		w.Header().Set("X-Content-Type-Options", "nosniff")
		h.ServeHTTP(w, r)
	})
}

func writeJSON(w http.ResponseWriter, code int, v any) {
	w.Header().Set("Content-Type", "application/json")
	w.Header().Set("Cache-Control", "no-store")
	w.WriteHeader(code)
	_ = json.NewEncoder(w).Encode(v)
}

func apiError(w http.ResponseWriter, code int, msg string) {
	writeJSON(w, code, map[string]string{"error": msg})
}

// authorized lets a request through with the configured bearer token.
func (s *Server) authorized(h http.HandlerFunc) http.HandlerFunc {
	return func(w http.ResponseWriter, r *http.Request) {
		if s.token == "" {
			apiError(w, http.StatusForbidden, "changes through the admin API are off: set admin.token (or admin.token_file, OUTBOX_RELAY_ADMIN_TOKEN)")
			return
		}
		got, ok := strings.CutPrefix(r.Header.Get("Authorization"), "Bearer ")
		if !ok || subtle.ConstantTimeCompare([]byte(got), []byte(s.token)) != 1 {
			apiError(w, http.StatusUnauthorized, "a valid bearer token is required")
			return
		}
		h(w, r)
	}
}

func (s *Server) apiSources(w http.ResponseWriter, r *http.Request) {
	v, err := s.api.Sources(r.Context())
	if err != nil {
		apiError(w, http.StatusInternalServerError, err.Error())
		return
	}
	writeJSON(w, http.StatusOK, v)
}

func (s *Server) apiDeadLetters(w http.ResponseWriter, r *http.Request) {
	q := r.URL.Query()
	f := DeadFilter{Source: q.Get("source"), EventType: q.Get("event_type"), Reason: q.Get("reason"), Limit: 100}
	if v := q.Get("since"); v != "" {
		d, err := time.ParseDuration(v)
		if err != nil {
			apiError(w, http.StatusBadRequest, "since: a duration such as 24h: "+err.Error())
			return
		}
		f.Since = time.Now().Add(-d)
	}
	if v := q.Get("limit"); v != "" {
		n, err := strconv.Atoi(v)
		if err != nil || n < 1 || n > 10000 {
			apiError(w, http.StatusBadRequest, "limit: a number from 1 to 10000")
			return
		}
		f.Limit = n
	}
	v, err := s.api.DeadLetters(r.Context(), f)
	if err != nil {
		apiError(w, http.StatusInternalServerError, err.Error())
		return
	}
	writeJSON(w, http.StatusOK, v)
}

// change serves a change to dead letters (replay, purge): the body names
// their ids; the answer says how many were done under key.
func (s *Server) change(key string, do func(context.Context, []string, string) (int, error)) http.HandlerFunc {
	return func(w http.ResponseWriter, r *http.Request) {
		var req struct {
			IDs []string `json:"ids"`
		}
		if err := json.NewDecoder(http.MaxBytesReader(w, r.Body, 1<<20)).Decode(&req); err != nil || len(req.IDs) == 0 {
			apiError(w, http.StatusBadRequest, `the body must be {"ids": ["<dead letter id>", ...]}`)
			return
		}
		actor := "console:" + r.RemoteAddr
		if a := strings.TrimSpace(r.Header.Get("X-Actor")); a != "" {
			actor = "console:" + a
		}
		n, err := do(r.Context(), req.IDs, actor)
		if err != nil {
			var nf notFound
			if errors.As(err, &nf) {
				apiError(w, http.StatusNotFound, err.Error())
				return
			}
			apiError(w, http.StatusInternalServerError, err.Error())
			return
		}
		s.logger.Info("dead letters "+key+" through the admin API", "count", n, "actor", actor)
		writeJSON(w, http.StatusOK, map[string]int{key: n})
	}
}

// notFound marks an error about ids that name no dead letter.
type notFound interface{ NotFound() bool }
