package admin

import (
	"context"
	"net/http"
	"net/http/httptest"
	"strings"
	"testing"
)

// fakeAPI records what the handlers ask.
type fakeAPI struct {
	filter  DeadFilter
	replays [][]string
	actor   string
}

func (f *fakeAPI) Sources(context.Context) (any, error) { return []string{"orders"}, nil }
func (f *fakeAPI) DeadLetters(_ context.Context, d DeadFilter) (any, error) {
	f.filter = d
	return []string{}, nil
}
func (f *fakeAPI) Replay(_ context.Context, ids []string, actor string) (int, error) {
	f.replays, f.actor = append(f.replays, ids), actor
	return len(ids), nil
}
func (f *fakeAPI) Purge(_ context.Context, ids []string, actor string) (int, error) {
	f.replays, f.actor = append(f.replays, ids), actor
	return len(ids), nil
}

func do(s *Server, method, path, auth, body string) *httptest.ResponseRecorder {
	req := httptest.NewRequest(method, path, strings.NewReader(body))
	if auth != "" {
		req.Header.Set("Authorization", auth)
	}
	req.Header.Set("X-Actor", "alice")
	rec := httptest.NewRecorder()
	s.http.Handler.ServeHTTP(rec, req)
	return rec
}

// TestAPIChangesNeedTheToken: reads are open; a replay needs the bearer
// token, and is refused outright when none is configured.
func TestAPIChangesNeedTheToken(t *testing.T) {
	api := &fakeAPI{}
	open := New(":0", nil, nil, nil).WithAPI(api, "")
	if rec := do(open, "POST", "/api/dead-letters/replay", "Bearer x", `{"ids":["1"]}`); rec.Code != http.StatusForbidden ||
		!strings.Contains(rec.Body.String(), "admin.token") {
		t.Errorf("replay with no token configured: %d %s", rec.Code, rec.Body)
	}
	s := New(":0", nil, nil, nil).WithAPI(api, "s3cret")
	for _, auth := range []string{"", "Bearer wrong", "s3cret", "Basic s3cret"} {
		if rec := do(s, "POST", "/api/dead-letters/replay", auth, `{"ids":["1"]}`); rec.Code != http.StatusUnauthorized {
			t.Errorf("replay with Authorization %q: %d, want 401", auth, rec.Code)
		}
	}
	if len(api.replays) != 0 {
		t.Fatalf("refused calls replayed %v", api.replays)
	}
	rec := do(s, "POST", "/api/dead-letters/replay", "Bearer s3cret", `{"ids":["1","2"]}`)
	if rec.Code != http.StatusOK || !strings.Contains(rec.Body.String(), `"replayed":2`) || api.actor != "console:alice" {
		t.Errorf("replay with the token: %d %s, actor %q", rec.Code, rec.Body, api.actor)
	}
	if rec := do(s, "POST", "/api/dead-letters/purge", "Bearer wrong", `{"ids":["3"]}`); rec.Code != http.StatusUnauthorized {
		t.Errorf("purge with a wrong token: %d", rec.Code)
	}
	if rec := do(s, "POST", "/api/dead-letters/purge", "Bearer s3cret", `{"ids":["3"]}`); rec.Code != http.StatusOK ||
		!strings.Contains(rec.Body.String(), `"purged":1`) {
		t.Errorf("purge with the token: %d %s", rec.Code, rec.Body)
	}
	if rec := do(s, "POST", "/api/dead-letters/replay", "Bearer s3cret", `{}`); rec.Code != http.StatusBadRequest {
		t.Errorf("replay of no ids: %d", rec.Code)
	}
	for _, path := range []string{"/api/sources", "/api/dead-letters"} {
		if rec := do(s, "GET", path, "", ""); rec.Code != http.StatusOK {
			t.Errorf("GET %s without a token: %d", path, rec.Code)
		}
	}
	if rec := do(s, "GET", "/", "", ""); rec.Code != http.StatusOK || !strings.Contains(rec.Body.String(), "<title>outbox-relay</title>") ||
		!strings.Contains(rec.Header().Get("Content-Security-Policy"), "frame-ancestors 'none'") {
		t.Errorf("GET /: %d, Content-Security-Policy %q", rec.Code, rec.Header().Get("Content-Security-Policy"))
	}
	if rec := do(s, "GET", "/console/console.js", "", ""); rec.Code != http.StatusOK {
		t.Errorf("GET /console/console.js: %d", rec.Code)
	}
}

func TestAPIDeadLetterFilters(t *testing.T) {
	api := &fakeAPI{}
	s := New(":0", nil, nil, nil).WithAPI(api, "")
	if rec := do(s, "GET", "/api/dead-letters?source=orders&event_type=order.placed&reason=topic&since=24h&limit=5", "", ""); rec.Code != http.StatusOK {
		t.Fatalf("%d %s", rec.Code, rec.Body)
	}
	f := api.filter
	if f.Source != "orders" || f.EventType != "order.placed" || f.Reason != "topic" || f.Limit != 5 || f.Since.IsZero() {
		t.Errorf("filter %+v", f)
	}
	for _, q := range []string{"since=yesterday", "limit=0", "limit=x"} {
		if rec := do(s, "GET", "/api/dead-letters?"+q, "", ""); rec.Code != http.StatusBadRequest {
			t.Errorf("?%s: %d, want 400", q, rec.Code)
		}
	}
}
