package mqtt

import (
	"strings"
	"testing"
	"time"

	"gopkg.in/yaml.v3"
)

func TestDefaults(t *testing.T) {
	t.Parallel()
	var a, b Config
	a.Defaults()
	b.Defaults()
	if a.URL != DefaultURL || a.KeepAlive != DefaultKeepAlive || a.PublishTimeout != DefaultPublishTimeout ||
		a.ConnectTimeout != DefaultConnectTimeout || a.MaxMessageBytes != DefaultMaxMessageBytes || a.MaxInFlight != DefaultMaxInFlight {
		t.Fatalf("defaults: %+v", a)
	}
	if !strings.HasPrefix(a.ClientID, DefaultClientIDPrefix) || a.ClientID == b.ClientID {
		t.Fatalf("client ids %q and %q: want distinct, prefixed %q", a.ClientID, b.ClientID, DefaultClientIDPrefix)
	}
	if ps := a.Problems(); len(ps) != 0 {
		t.Fatalf("defaults have problems: %v", ps)
	}
}

func TestYAML(t *testing.T) {
	t.Parallel()
	var c Config
	src := "url: mqtts://broker:8884\nclient_id: relay-1\nusername: u\npassword: p\nkeepalive: 15s\n" +
		"publish_timeout: 5s\nsession_expiry: 1m\ntls:\n  insecure_skip_verify: true\n"
	if err := yaml.Unmarshal([]byte(src), &c); err != nil {
		t.Fatal(err)
	}
	if c.URL != "mqtts://broker:8884" || c.ClientID != "relay-1" || c.Username != "u" || c.Password != "p" ||
		c.KeepAlive != 15*time.Second || c.PublishTimeout != 5*time.Second || c.SessionExpiry != time.Minute ||
		!c.TLS.InsecureSkipVerify {
		t.Fatalf("decoded %+v", c)
	}
	p, err := New(c)
	if err != nil {
		t.Fatal(err)
	}
	if p.addr != "broker:8884" || p.tls == nil || p.tls.ServerName != "broker" {
		t.Fatalf("addr %q tls %v", p.addr, p.tls)
	}
}

func TestProblems(t *testing.T) {
	t.Parallel()
	c := Config{
		URL: "http://nope", Password: "p", KeepAlive: 1500 * time.Millisecond, PublishTimeout: -1,
		ConnectTimeout: -1, SessionExpiry: -1, MaxMessageBytes: maxPacket + 1, MaxInFlight: -1,
	}
	got := map[string]bool{}
	for _, p := range c.Problems() {
		got[p.Field] = true
	}
	for _, f := range []string{"url", "username", "keepalive", "publish_timeout", "connect_timeout",
		"session_expiry", "max_message_bytes", "max_in_flight"} {
		if !got[f] {
			t.Errorf("no problem for %s (got %v)", f, got)
		}
	}
	if _, err := New(c); err == nil {
		t.Error("New accepted an invalid configuration")
	}
}

func TestParseURL(t *testing.T) {
	t.Parallel()
	for _, tc := range []struct {
		url, addr string
		tls, bad  bool
	}{
		{"mqtt://127.0.0.1:1883", "127.0.0.1:1883", false, false},
		{"tcp://broker", "broker:1883", false, false},
		{"mqtts://broker", "broker:8883", true, false},
		{"ssl://broker:9000", "broker:9000", true, false},
		{"mqtt://[::1]:1884", "[::1]:1884", false, false},
		{"ws://broker", "", false, true},
		{"mqtt://", "", false, true},
	} {
		addr, tls, err := parseURL(tc.url)
		if (err != nil) != tc.bad || addr != tc.addr || tls != tc.tls {
			t.Errorf("%s: got %q %v %v", tc.url, addr, tls, err)
		}
	}
}
