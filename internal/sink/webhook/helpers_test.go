package webhook

import (
	"context"
	"crypto/rand"
	"encoding/hex"
	"io"
	"net/http"
	"net/http/httptest"
	"net/url"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/outbox-relay/outbox-relay/internal/sink"
	"github.com/outbox-relay/outbox-relay/internal/sink/sinktest"
)

// relayKeys maps the HTTP form of the relay's own header keys back to the
// keys, as a receiver that knows them does.
var relayKeys = map[string]string{
	"event-id":       "event_id",
	"event-type":     "event_type",
	"aggregate-type": "aggregate_type",
	"aggregate-id":   "aggregate_id",
	"outbox-source":  "outbox_source",
}

// request is one request a receiver accepted.
type request struct {
	Method string
	Path   string
	Header http.Header
	Body   []byte
}

// receiver is a webhook endpoint on localhost that records what it
// accepts, per path under /hooks/. A path starting with "gone-" answers 404;
// respond, when set, may answer instead (it returns false to go on).
type receiver struct {
	srv *httptest.Server

	mu      sync.Mutex
	got     map[string][]request
	respond func(w http.ResponseWriter, r *http.Request, body []byte) bool
}

func newReceiver(t testing.TB) *receiver {
	t.Helper()
	rc := &receiver{got: map[string][]request{}}
	rc.srv = httptest.NewServer(http.HandlerFunc(rc.serve))
	t.Cleanup(rc.srv.Close)
	return rc
}

func (rc *receiver) serve(w http.ResponseWriter, r *http.Request) {
	body, err := io.ReadAll(r.Body)
	if err != nil {
		return // the connection was cut
	}
	rc.mu.Lock()
	respond := rc.respond
	rc.mu.Unlock()
	if respond != nil && respond(w, r, body) {
		return
	}
	dest, ok := strings.CutPrefix(r.URL.Path, "/hooks/")
	if !ok || strings.HasPrefix(dest, "gone-") {
		http.Error(w, "no such hook", http.StatusNotFound)
		return
	}
	rc.mu.Lock()
	rc.got[dest] = append(rc.got[dest], request{Method: r.Method, Path: r.URL.EscapedPath(), Header: r.Header.Clone(), Body: body})
	rc.mu.Unlock()
	w.WriteHeader(http.StatusNoContent)
}

func (rc *receiver) setRespond(f func(w http.ResponseWriter, r *http.Request, body []byte) bool) {
	rc.mu.Lock()
	rc.respond = f
	rc.mu.Unlock()
}

func (rc *receiver) requests(dest string) []request {
	rc.mu.Lock()
	defer rc.mu.Unlock()
	return append([]request(nil), rc.got[dest]...)
}

// addr is the server's host:port.
func (rc *receiver) addr() string { return rc.srv.Listener.Addr().String() }

// hookURL is the URL template of the receiver's hooks at addr.
func hookURL(addr string) string { return "http://" + addr + "/hooks/{destination}" }

// received converts a recorded request back into what was sent.
func received(r request) sinktest.Received {
	rc := sinktest.Received{ID: r.Header.Get("Idempotency-Key"), Payload: r.Body}
	if k := r.Header.Values(KeyHeader); len(k) > 0 {
		key, err := url.PathUnescape(k[0])
		if err != nil {
			key = "undecodable: " + k[0]
		}
		rc.Key = []byte(key)
	}
	for name, vs := range r.Header {
		key, ok := strings.CutPrefix(strings.ToLower(name), strings.ToLower(HeaderPrefix))
		if !ok || strings.EqualFold(name, DefaultSignatureHeader) || strings.EqualFold(name, KeyHeader) {
			continue
		}
		if k, ok := relayKeys[key]; ok {
			key = k
		}
		for _, v := range vs {
			rc.Headers = append(rc.Headers, sink.Header{Key: key, Value: []byte(v)})
		}
	}
	return rc
}

func suffix() string {
	b := make([]byte, 6)
	_, _ = rand.Read(b)
	return hex.EncodeToString(b)
}

func testCtx(t testing.TB) context.Context {
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	t.Cleanup(cancel)
	return ctx
}

func newPublisher(t testing.TB, cfg Config) *Publisher {
	t.Helper()
	p, err := New(cfg)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = p.Close(context.Background()) })
	return p
}

// msg builds a message for dest with the relay's headers.
func msg(dest, id, key, payload string) *sink.Message {
	m := &sink.Message{
		ID:          id,
		Destination: dest,
		Headers: []sink.Header{
			{Key: "event_id", Value: []byte(id)},
			{Key: "event_type", Value: []byte("order.created")},
		},
		Payload: []byte(payload),
	}
	if key != "" {
		m.Key = []byte(key)
	}
	return m
}
