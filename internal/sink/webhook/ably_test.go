package webhook

import (
	"encoding/base64"
	"errors"
	"strconv"
	"testing"
	"time"

	"github.com/outbox-relay/outbox-relay/internal/sink"
)

func newAblyPublisher(t testing.TB, as *ablyServer, key string, codes map[string]string) *Publisher {
	t.Helper()
	return newPublisher(t, Config{
		Preset:     PresetAbly,
		Ably:       Ably{APIKey: key, BaseURL: as.srv.URL + "/"},
		ErrorCodes: ErrorCodes{Codes: codes},
	})
}

func TestAblyRequest(t *testing.T) {
	as := newAblyServer(t)
	p := newAblyPublisher(t, as, testAblyKey, nil)
	channel := "tenant:" + suffix() + "/east"
	payloads := []struct {
		payload, data, encoding string
	}{
		{`{"taskId":"t1","claimedBy":"u2"}`, `{"taskId":"t1","claimedBy":"u2"}`, ""},
		{`[1,2]`, `[1,2]`, ""},
		{`"just text"`, `"just text"`, ""},
		{`42`, `"42"`, "json"},
		{`plain text`, `"plain text"`, ""},
		{"\xff\x00bin", `"` + base64.StdEncoding.EncodeToString([]byte("\xff\x00bin")) + `"`, "base64"},
	}
	var msgs []*sink.Message
	for i, pl := range payloads {
		m := msg(channel, string(rune('a'+i)), "task-1", pl.payload)
		m.Headers[1].Value = []byte("kitchen.task.claimed")
		m.Headers = append(m.Headers, sink.Header{Key: "aggregate_id", Value: []byte("t1")})
		msgs = append(msgs, m)
	}
	for i, err := range p.Publish(testCtx(t), msgs) {
		if err != nil {
			t.Fatalf("message %d: %v", i, err)
		}
	}
	got := as.messages(channel)
	if len(got) != len(payloads) {
		t.Fatalf("Ably received %d messages on %q, want %d", len(got), channel, len(payloads))
	}
	for i, r := range got {
		want := payloads[i]
		if r.ID != msgs[i].ID || r.Name != "kitchen.task.claimed" {
			t.Errorf("message %d: id %q name %q", i, r.ID, r.Name)
		}
		if string(r.Data) != want.data || r.Encoding != want.encoding {
			t.Errorf("message %d: data %s encoding %q, want %s %q", i, r.Data, r.Encoding, want.data, want.encoding)
		}
		if r.Headers["event_id"] != msgs[i].ID || r.Headers["aggregate_id"] != "t1" || r.Headers["event_type"] != "kitchen.task.claimed" {
			t.Errorf("message %d: extras.headers %v", i, r.Headers)
		}
	}
	h := as.lastHeaders(channel)
	if h.Get("Accept") != "application/json" || h.Get("Idempotency-Key") == "" {
		t.Errorf("request headers %v", h)
	}
}

func TestAblyIdempotentID(t *testing.T) {
	as := newAblyServer(t)
	p := newAblyPublisher(t, as, testAblyKey, nil)
	channel := "tenant:" + suffix()
	m := msg(channel, "evt-1", "k", `{"n":1}`)
	for range 2 {
		if err := p.Publish(testCtx(t), []*sink.Message{m})[0]; err != nil {
			t.Fatal(err)
		}
	}
	if n := len(as.messages(channel)); n != 1 {
		t.Fatalf("a republished event arrived %d times; Ably dedupes by message id", n)
	}
}

func TestAblyErrorClassification(t *testing.T) {
	as := newAblyServer(t)
	p := newAblyPublisher(t, as, testAblyKey, nil)
	override := newAblyPublisher(t, as, testAblyKey, map[string]string{"40140": ClassTerminal, "42910": ClassTerminal})
	tests := []struct {
		name             string
		status, code     int
		retryAfter       string
		terminal         bool
		overrideTerminal bool
		delay            time.Duration
	}{
		{"token expired", 401, 40140, "", false, true, 0},
		{"capability refused", 401, 40160, "", false, false, 0},
		{"account limit", 403, 40115, "", false, false, 0},
		{"forbidden", 403, 40300, "", true, true, 0},
		{"too large", 400, 40009, "", true, true, 0},
		{"invalid id", 400, 40031, "", true, true, 0},
		{"not found", 404, 40400, "", true, true, 0},
		{"rate limited", 429, 42910, "3", false, true, 3 * time.Second},
		{"internal", 500, 50000, "", false, false, 0},
		{"unavailable", 503, 50300, "", false, false, 0},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			channel := "fail:" + suffix()
			as.failWith(channel, tt.status, tt.code, tt.retryAfter)
			m := []*sink.Message{msg(channel, "1", "", "{}")}
			err := p.Publish(testCtx(t), m)[0]
			if err == nil || sink.IsTerminal(err) != tt.terminal {
				t.Fatalf("%d/%d: %v, want terminal=%v", tt.status, tt.code, err, tt.terminal)
			}
			var se *StatusError
			if !errors.As(err, &se) || se.Code != strconv.Itoa(tt.code) {
				t.Fatalf("error does not carry Ably's code: %v", err)
			}
			d, ok := sink.RetryAfter(err)
			if ok != (tt.delay > 0) || d != tt.delay {
				t.Fatalf("retry-after %v, %v; want %v", d, ok, tt.delay)
			}
			if err := override.Publish(testCtx(t), m)[0]; sink.IsTerminal(err) != tt.overrideTerminal {
				t.Fatalf("with error_codes overrides: %v, want terminal=%v", err, tt.overrideTerminal)
			}
		})
	}
}

func TestAblyWrongKeyIsRetryable(t *testing.T) {
	as := newAblyServer(t)
	p := newAblyPublisher(t, as, "appid.keyid:wrong", nil)
	err := p.Publish(testCtx(t), []*sink.Message{msg("tenant:"+suffix(), "1", "", "{}")})[0]
	var se *StatusError
	if err == nil || sink.IsTerminal(err) || !errors.As(err, &se) || se.Code != "40101" {
		t.Fatalf("wrong key: %v, want retryable 40101", err)
	}
}

func TestAblyPing(t *testing.T) {
	as := newAblyServer(t)
	p := newAblyPublisher(t, as, testAblyKey, nil)
	if err := p.Ping(testCtx(t)); err != nil {
		t.Fatal(err)
	}
	as.mu.Lock()
	times := as.times
	as.mu.Unlock()
	if times != 1 {
		t.Fatalf("ping asked /time %d times", times)
	}
	as.srv.Close()
	if p.Ping(testCtx(t)) == nil {
		t.Fatal("ping succeeded with Ably down")
	}
}

func TestAblyData(t *testing.T) {
	tests := []struct{ payload, data, enc string }{
		{`{"a":1}`, `{"a":1}`, ""},
		{` {"a":1} `, `{"a":1}`, ""},
		{`true`, `"true"`, "json"},
		{`null`, `"null"`, "json"},
		{``, `""`, ""},
		{`{broken`, `"{broken"`, ""},
		{"\x80", `"gA=="`, "base64"},
	}
	for _, tt := range tests {
		data, enc, err := ablyData([]byte(tt.payload))
		if err != nil || string(data) != tt.data || enc != tt.enc {
			t.Errorf("ablyData(%q) = %s, %q, %v; want %s, %q", tt.payload, data, enc, err, tt.data, tt.enc)
		}
	}
}
