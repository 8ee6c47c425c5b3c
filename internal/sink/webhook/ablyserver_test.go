package webhook

import (
	"bytes"
	"encoding/base64"
	"encoding/json"
	"fmt"
	"io"
	"mime"
	"net/http"
	"net/http/httptest"
	"net/url"
	"strconv"
	"strings"
	"sync"
	"testing"

	"github.com/outbox-relay/outbox-relay/internal/sink"
	"github.com/outbox-relay/outbox-relay/internal/sink/sinktest"
)

const (
	testAblyKey = "appid.keyid:s3cret"
	// invalidChannelPrefix starts a channel name the stand-in refuses as
	// Ably refuses an invalid channel name (400, code 40010).
	invalidChannelPrefix = "[bad]"
)

// ablyServer stands in for Ably's REST publish endpoint, checking each
// request against Ably's REST API reference: POST
// /channels/{channel}/messages, Authorization: Basic base64(key), a JSON
// message object with only documented fields, id as idempotency key;
// answering 201 {"channel","messageId"} or Ably's error object.
type ablyServer struct {
	srv *httptest.Server

	mu       sync.Mutex
	got      map[string][]ablyRecord // by channel, first arrival of each id
	seen     map[string]bool         // channel + "\x00" + id
	failures map[string]ablyFailure  // channel -> forced answer
	headers  map[string]http.Header  // channel -> last request's headers
	times    int
}

type ablyRecord struct {
	ID, Name, Encoding string
	Data               json.RawMessage
	Headers            map[string]string
}

type ablyFailure struct {
	status, code int
	retryAfter   string
}

func newAblyServer(t testing.TB) *ablyServer {
	t.Helper()
	as := &ablyServer{
		got:      map[string][]ablyRecord{},
		seen:     map[string]bool{},
		failures: map[string]ablyFailure{},
		headers:  map[string]http.Header{},
	}
	mux := http.NewServeMux()
	mux.HandleFunc("GET /time", func(w http.ResponseWriter, r *http.Request) {
		as.mu.Lock()
		as.times++
		as.mu.Unlock()
		fmt.Fprint(w, "[1700000000000]")
	})
	mux.HandleFunc("/", as.publish)
	as.srv = httptest.NewServer(mux)
	t.Cleanup(as.srv.Close)
	return as
}

func (as *ablyServer) addr() string { return as.srv.Listener.Addr().String() }

func (as *ablyServer) failWith(channel string, status, code int, retryAfter string) {
	as.mu.Lock()
	as.failures[channel] = ablyFailure{status, code, retryAfter}
	as.mu.Unlock()
}

func (as *ablyServer) messages(channel string) []ablyRecord {
	as.mu.Lock()
	defer as.mu.Unlock()
	return append([]ablyRecord(nil), as.got[channel]...)
}

func (as *ablyServer) lastHeaders(channel string) http.Header {
	as.mu.Lock()
	defer as.mu.Unlock()
	return as.headers[channel]
}

// ablyError answers as Ably does: the error object and X-Ably-ErrorCode.
func ablyError(w http.ResponseWriter, status, code int, msg string) {
	w.Header().Set("Content-Type", "application/json")
	w.Header().Set("X-Ably-ErrorCode", strconv.Itoa(code))
	w.WriteHeader(status)
	_ = json.NewEncoder(w).Encode(map[string]any{
		"error": map[string]any{"code": code, "statusCode": status, "message": msg},
	})
}

func (as *ablyServer) publish(w http.ResponseWriter, r *http.Request) {
	body, err := io.ReadAll(r.Body)
	if err != nil {
		return
	}
	seg, ok := strings.CutPrefix(r.URL.EscapedPath(), "/channels/")
	seg, ok2 := strings.CutSuffix(seg, "/messages")
	if !ok || !ok2 || seg == "" || strings.Contains(seg, "/") {
		ablyError(w, http.StatusNotFound, 40400, "no such route "+r.URL.EscapedPath())
		return
	}
	channel, err := url.PathUnescape(seg)
	if err != nil {
		ablyError(w, http.StatusBadRequest, 40010, "invalid channel name")
		return
	}
	if r.Method != http.MethodPost {
		ablyError(w, http.StatusMethodNotAllowed, 40500, "method not allowed")
		return
	}
	if r.Header.Get("Authorization") != "Basic "+base64.StdEncoding.EncodeToString([]byte(testAblyKey)) {
		ablyError(w, http.StatusUnauthorized, 40101, "invalid credentials")
		return
	}
	if mt, _, _ := mime.ParseMediaType(r.Header.Get("Content-Type")); mt != "application/json" {
		ablyError(w, http.StatusBadRequest, 40000, "unsupported content type")
		return
	}
	rec, err := parseAblyMessage(body)
	if err != nil {
		ablyError(w, http.StatusBadRequest, 40001, err.Error())
		return
	}
	if strings.HasPrefix(channel, invalidChannelPrefix) {
		ablyError(w, http.StatusBadRequest, 40010, "invalid channel name")
		return
	}
	as.mu.Lock()
	as.headers[channel] = r.Header.Clone()
	f, fail := as.failures[channel]
	if !fail && !as.seen[channel+"\x00"+rec.ID] {
		as.seen[channel+"\x00"+rec.ID] = true
		as.got[channel] = append(as.got[channel], rec)
	}
	as.mu.Unlock()
	if fail {
		if f.retryAfter != "" {
			w.Header().Set("Retry-After", f.retryAfter)
		}
		ablyError(w, f.status, f.code, "forced failure")
		return
	}
	w.Header().Set("Content-Type", "application/json")
	w.WriteHeader(http.StatusCreated)
	_ = json.NewEncoder(w).Encode(map[string]string{"channel": channel, "messageId": rec.ID})
}

// parseAblyMessage checks a body against Ably's message object: only its
// documented fields, an id, data a string, object or array, a known
// encoding, extras.headers of strings.
func parseAblyMessage(body []byte) (ablyRecord, error) {
	var fields map[string]json.RawMessage
	if err := json.Unmarshal(body, &fields); err != nil {
		return ablyRecord{}, fmt.Errorf("body is not a message object: %w", err)
	}
	allowed := map[string]bool{"id": true, "name": true, "data": true, "encoding": true, "clientId": true, "connectionKey": true, "extras": true}
	for k := range fields {
		if !allowed[k] {
			return ablyRecord{}, fmt.Errorf("unknown message field %q", k)
		}
	}
	var rec ablyRecord
	if err := json.Unmarshal(fields["id"], &rec.ID); err != nil || rec.ID == "" {
		return ablyRecord{}, fmt.Errorf("id must be a non-empty string")
	}
	if raw, ok := fields["name"]; ok {
		if err := json.Unmarshal(raw, &rec.Name); err != nil {
			return ablyRecord{}, fmt.Errorf("name must be a string")
		}
	}
	rec.Data = fields["data"]
	if len(rec.Data) == 0 || !strings.ContainsRune(`{["`, rune(rec.Data[0])) {
		return ablyRecord{}, fmt.Errorf("data must be a string, object or array, not %s", rec.Data)
	}
	if raw, ok := fields["encoding"]; ok {
		if err := json.Unmarshal(raw, &rec.Encoding); err != nil || (rec.Encoding != "json" && rec.Encoding != "base64") {
			return ablyRecord{}, fmt.Errorf("unexpected encoding %s", raw)
		}
		if rec.Data[0] != '"' {
			return ablyRecord{}, fmt.Errorf("encoded data must be a string")
		}
	}
	if raw, ok := fields["extras"]; ok {
		var extras struct {
			Headers map[string]string `json:"headers"`
		}
		dec := json.NewDecoder(bytes.NewReader(raw))
		dec.DisallowUnknownFields()
		if err := dec.Decode(&extras); err != nil {
			return ablyRecord{}, fmt.Errorf("extras: %w", err)
		}
		rec.Headers = extras.Headers
	}
	return rec, nil
}

// payload decodes data back into the bytes that were published.
func (r ablyRecord) payload() []byte {
	if r.Data[0] != '"' {
		return r.Data
	}
	var s string
	_ = json.Unmarshal(r.Data, &s)
	if r.Encoding == "base64" {
		b, _ := base64.StdEncoding.DecodeString(s)
		return b
	}
	return []byte(s)
}

func (r ablyRecord) received() sinktest.Received {
	rc := sinktest.Received{ID: r.ID, Payload: r.payload()}
	for k, v := range r.Headers {
		rc.Headers = append(rc.Headers, sink.Header{Key: k, Value: []byte(v)})
	}
	return rc
}
