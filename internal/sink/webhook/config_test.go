package webhook

import (
	"net/url"
	"slices"
	"strings"
	"testing"
	"time"

	"gopkg.in/yaml.v3"
)

func TestDefaults(t *testing.T) {
	var c Config
	c.Defaults()
	if c.Method != "POST" || c.Timeout != DefaultTimeout || c.Concurrency != DefaultConcurrency ||
		c.MaxMessageBytes != DefaultMaxMessageBytes || c.HMAC.Header != DefaultSignatureHeader {
		t.Fatalf("defaults: %+v", c)
	}
	a := Config{Preset: "Ably"}
	a.Defaults()
	if a.Preset != PresetAbly || a.Ably.BaseURL != DefaultAblyBaseURL || a.MaxMessageBytes != AblyMaxMessageBytes || a.ErrorCodes.Path != "error.code" {
		t.Fatalf("ably defaults: %+v", a)
	}
	kept := Config{Method: "put", Timeout: time.Second, Concurrency: 2, MaxMessageBytes: 10}
	kept.Defaults()
	if kept.Method != "PUT" || kept.Timeout != time.Second || kept.Concurrency != 2 || kept.MaxMessageBytes != 10 {
		t.Fatalf("set values changed: %+v", kept)
	}
}

func TestProblems(t *testing.T) {
	tests := []struct {
		name   string
		cfg    Config
		fields []string // fields with a problem, sorted
	}{
		{"valid", Config{URL: "https://h/hooks/{destination}"}, nil},
		{"whole URL", Config{URL: "{destination}"}, nil},
		{"preset none", Config{Preset: "none", URL: "https://h/"}, nil},
		{"valid ably", Config{Preset: "ably", Ably: Ably{APIKey: "a.b:c"}}, nil},
		{"no url", Config{}, []string{"url"}},
		{"relative url", Config{URL: "/hooks/{destination}"}, []string{"url"}},
		{"ftp", Config{URL: "ftp://h/{destination}"}, []string{"url"}},
		{"placeholder in host", Config{URL: "https://{destination}.example.com/x"}, []string{"url"}},
		{"placeholder before host", Config{URL: "{destination}/x"}, []string{"url"}},
		{"method", Config{URL: "https://h/", Method: "GET"}, []string{"method"}},
		{"bad header", Config{URL: "https://h/", Headers: map[string]string{"Bad Name": "v", "X-Ok": "a\nb"}}, []string{"headers.Bad Name", "headers.X-Ok"}},
		{"numbers", Config{URL: "https://h/", Timeout: -1, Concurrency: -1, MaxMessageBytes: -1}, []string{"concurrency", "max_message_bytes", "timeout"}},
		{"hmac header", Config{URL: "https://h/", HMAC: HMAC{Secret: "s", Header: "X Sig"}}, []string{"hmac.header"}},
		{"codes", Config{URL: "https://h/", ErrorCodes: ErrorCodes{Codes: map[string]string{"E1": "fatal"}}}, []string{"error_codes.codes.E1", "error_codes.path"}},
		{"tls", Config{URL: "https://h/", TLS: TLS{CAFile: "ca.pem", InsecureSkipVerify: true}}, []string{"tls.insecure_skip_verify"}},
		{"preset", Config{Preset: "pusher", URL: "https://h/"}, []string{"preset"}},
		{"ably without key", Config{Preset: "ably"}, []string{"ably.api_key"}},
		{"ably key shape", Config{Preset: "ably", Ably: Ably{APIKey: "secret"}}, []string{"ably.api_key"}},
		{"ably extras", Config{Preset: "ably", URL: "https://h/", Method: "PUT", ContentType: "text/plain",
			HMAC: HMAC{Secret: "s"}, Ably: Ably{APIKey: "a.b:c", BaseURL: "rest.ably.io"}},
			[]string{"ably.base_url", "content_type", "hmac.secret", "method", "url"}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			tt.cfg.Defaults()
			var fields []string
			for _, p := range tt.cfg.Problems() {
				if p.Msg == "" {
					t.Errorf("problem at %s has no message", p.Field)
				}
				fields = append(fields, p.Field)
			}
			slices.Sort(fields)
			if !slices.Equal(fields, tt.fields) {
				t.Fatalf("problems at %v, want %v", fields, tt.fields)
			}
			_, err := New(tt.cfg)
			if (err == nil) != (len(tt.fields) == 0) {
				t.Fatalf("New: %v", err)
			}
		})
	}
}

func TestConfigYAML(t *testing.T) {
	const doc = `
url: https://hooks.example.com/outbox/{destination}
method: PUT
headers:
  Authorization: Bearer abc
timeout: 2500ms
concurrency: 8
max_message_bytes: 262144
hmac:
  secret: s3cret
error_codes:
  path: error.code
  codes:
    rate_limited: retryable
    "40*": terminal
tls:
  ca_file: /etc/ssl/hooks.pem
`
	var c Config
	if err := yaml.Unmarshal([]byte(doc), &c); err != nil {
		t.Fatal(err)
	}
	c.Defaults()
	if c.Timeout != 2500*time.Millisecond || c.Method != "PUT" || c.Concurrency != 8 || c.HMAC.Secret != "s3cret" ||
		c.ErrorCodes.Codes["40*"] != ClassTerminal || c.TLS.CAFile != "/etc/ssl/hooks.pem" || c.Headers["Authorization"] != "Bearer abc" {
		t.Fatalf("decoded %+v", c)
	}
	if ps := c.Problems(); len(ps) != 0 {
		t.Fatalf("problems: %v", ps)
	}
	var bad Config
	if err := yaml.Unmarshal([]byte("timeout: soon"), &bad); err == nil {
		t.Fatal("a timeout without a unit was accepted")
	}
}

// FuzzRender: whatever the destination, a path template renders to an
// absolute URL on the template's host whose path holds the destination
// intact, or fails terminally; it never panics.
func FuzzRender(f *testing.F) {
	for _, s := range []string{"orders", "tenant:42", "a/b", "../x", "%2F", "?q=1#f", "", " ", "\x00", "é"} {
		f.Add(s)
	}
	tmpl := parseTemplate("https://h.example/hooks/{destination}/in?src={destination}")
	f.Fuzz(func(t *testing.T, dest string) {
		s, err := tmpl.render(dest)
		if err != nil {
			return
		}
		u, perr := url.Parse(s)
		if perr != nil {
			t.Fatalf("rendered %q does not parse: %v", s, perr)
		}
		if u.Host != "h.example" {
			t.Fatalf("destination %q moved the host to %q", dest, u.Host)
		}
		seg, ok := strings.CutPrefix(u.EscapedPath(), "/hooks/")
		seg, ok2 := strings.CutSuffix(seg, "/in")
		if !ok || !ok2 {
			t.Fatalf("destination %q broke the path: %q", dest, u.EscapedPath())
		}
		if got, _ := url.PathUnescape(seg); got != dest {
			t.Fatalf("path holds %q, want %q", got, dest)
		}
		if got := u.Query().Get("src"); got != dest {
			t.Fatalf("query holds %q, want %q", got, dest)
		}
	})
}
