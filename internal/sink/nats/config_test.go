package nats

import (
	"reflect"
	"strings"
	"testing"
	"time"

	"gopkg.in/yaml.v3"

	"github.com/outbox-relay/outbox-relay/internal/sink/sinkconf"
	"github.com/outbox-relay/outbox-relay/internal/tlsconf"
)

func TestConfigYAML(t *testing.T) {
	const doc = `
url: nats://a:4222, nats://b:4222
servers: [nats://c:4222]
name: relay-eu
user: relay
password: secret
tls: {enabled: true, server_name: nats.internal}
ack_timeout: 3s
max_pending: 64
max_pending_per_key: 4
reconnect_wait: 250ms
retry_horizon: 10m
`
	dec := yaml.NewDecoder(strings.NewReader(doc))
	dec.KnownFields(true)
	var c Config
	if err := dec.Decode(&c); err != nil {
		t.Fatal(err)
	}
	c.Defaults()
	want := Config{
		URL: "nats://a:4222, nats://b:4222", Servers: []string{"nats://c:4222"}, Name: "relay-eu",
		User: "relay", Password: "secret",
		TLS:        tlsconf.Config{Enabled: true, ServerName: "nats.internal"},
		AckTimeout: sinkconf.Duration(3 * time.Second), MaxPending: 64, MaxPendingPerKey: 4,
		ReconnectWait: sinkconf.Duration(250 * time.Millisecond), RetryHorizon: sinkconf.Duration(10 * time.Minute),
	}
	if !reflect.DeepEqual(c, want) {
		t.Fatalf("decoded %+v\nwant    %+v", c, want)
	}
	if ps := c.Problems(); len(ps) != 0 {
		t.Fatalf("problems: %v", ps)
	}
	if got := c.serverList(); !reflect.DeepEqual(got, []string{"nats://a:4222", "nats://b:4222", "nats://c:4222"}) {
		t.Fatalf("servers %q", got)
	}
}

func TestConfigDefaults(t *testing.T) {
	c := Config{URL: "nats://127.0.0.1:4222"}
	c.Defaults()
	if c.Name != DefaultName || c.AckTimeout.D() != DefaultAckTimeout || c.MaxPending != DefaultMaxPending ||
		c.ReconnectWait.D() != DefaultReconnectWait || c.RetryHorizon.D() != DefaultRetryHorizon {
		t.Fatalf("defaults: %+v", c)
	}
}

func TestConfigProblems(t *testing.T) {
	for _, tc := range []struct {
		name string
		c    Config
		want []string // "field: message" prefixes
	}{
		{"no server", Config{}, []string{"url: required"}},
		{"bad scheme", Config{URL: "http://x:4222"}, []string{"url: server URL"}},
		{"bad server", Config{URL: "nats://a", Servers: []string{"nats://b", "redis://c"}}, []string{"servers[1]: server URL"}},
		{"two auths", Config{URL: "nats://a", Token: "t", User: "u"}, []string{"user: give only one"}},
		{"password alone", Config{URL: "nats://a", Password: "p"}, []string{"user: required with password"}},
		{"tls pair", Config{URL: "nats://a", TLS: tlsconf.Config{CertFile: "/nonexistent/c.pem"}}, []string{"tls.cert_file: cert_file and key_file go together", "tls.cert_file: stat"}},
		{"negatives", Config{URL: "nats://a", AckTimeout: -1, MaxPending: -1, ReconnectWait: -1, RetryHorizon: -1},
			[]string{"ack_timeout:", "max_pending:", "reconnect_wait:", "retry_horizon:"}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			ps := tc.c.Problems()
			if len(ps) != len(tc.want) {
				t.Fatalf("problems %v, want %d", ps, len(tc.want))
			}
			for i, p := range ps {
				if got := p.Field + ": " + p.Msg; !strings.HasPrefix(got, tc.want[i]) {
					t.Errorf("problem %d = %q, want prefix %q", i, got, tc.want[i])
				}
			}
			if _, err := New(tc.c); err == nil {
				t.Error("New accepted an invalid configuration")
			}
		})
	}
}
