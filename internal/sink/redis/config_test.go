package redis

import (
	"strings"
	"testing"
	"time"

	"gopkg.in/yaml.v3"

	"github.com/outbox-relay/outbox-relay/internal/tlsconf"
)

func TestConfigYAMLAndOptions(t *testing.T) {
	const doc = `
url: rediss://u:urlpass@cache.internal:6380/2
username: relay
password: secret
db: 5
tls: {insecure_skip_verify: true}
max_len: 100000
timeout: 750ms
max_message_bytes: 1048576
`
	dec := yaml.NewDecoder(strings.NewReader(doc))
	dec.KnownFields(true)
	var c Config
	if err := dec.Decode(&c); err != nil {
		t.Fatal(err)
	}
	c.Defaults()
	if ps := c.Problems(); len(ps) != 0 {
		t.Fatalf("problems: %v", ps)
	}
	if c.MaxLen != 100000 || c.Timeout.D() != 750*time.Millisecond || c.MaxMessageBytes != 1<<20 {
		t.Fatalf("decoded %+v", c)
	}
	o, err := c.options()
	if err != nil {
		t.Fatal(err)
	}
	if o.Addr != "cache.internal:6380" || o.Username != "relay" || o.Password != "secret" || o.DB != 5 {
		t.Errorf("addr %s user %s password %s db %d", o.Addr, o.Username, o.Password, o.DB)
	}
	if o.TLSConfig == nil || !o.TLSConfig.InsecureSkipVerify || o.TLSConfig.ServerName != "cache.internal" {
		t.Errorf("tls %+v", o.TLSConfig)
	}
	if o.ReadTimeout != 750*time.Millisecond || o.WriteTimeout != o.ReadTimeout || o.DialTimeout != o.ReadTimeout {
		t.Errorf("timeouts %s %s %s", o.DialTimeout, o.ReadTimeout, o.WriteTimeout)
	}
	if o.MaxRetries != -1 {
		t.Errorf("MaxRetries %d: the client must not retry pipelines", o.MaxRetries)
	}
}

func TestConfigURLKeepsItsSettings(t *testing.T) {
	c := Config{URL: "redis://:pw@127.0.0.1:6379/3"}
	c.Defaults()
	o, err := c.options()
	if err != nil {
		t.Fatal(err)
	}
	if o.Password != "pw" || o.DB != 3 || o.TLSConfig != nil {
		t.Fatalf("password %q db %d tls %v", o.Password, o.DB, o.TLSConfig)
	}
	if c.Timeout.D() != DefaultTimeout || c.MaxMessageBytes != DefaultMaxMessageBytes {
		t.Fatalf("defaults %+v", c)
	}
}

func TestConfigProblems(t *testing.T) {
	for _, tc := range []struct {
		name string
		c    Config
		want []string
	}{
		{"no url", Config{}, []string{"url: required"}},
		{"bad scheme", Config{URL: "http://x"}, []string{"url: "}},
		{"password hidden", Config{URL: "redis://u:hunter2@x:6379/notadb"}, []string{"url: "}},
		{"negatives", Config{URL: "redis://x", DB: -1, MaxLen: -1, Timeout: -1, MaxMessageBytes: -1},
			[]string{"db:", "max_len:", "timeout:", "max_message_bytes:"}},
		{"tls pair", Config{URL: "redis://x", TLS: tlsconf.Config{KeyFile: "/nonexistent/k.pem"}}, []string{"tls.cert_file: cert_file and key_file go together", "tls.key_file: stat"}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			ps := tc.c.Problems()
			if len(ps) != len(tc.want) {
				t.Fatalf("problems %v, want %d", ps, len(tc.want))
			}
			for i, p := range ps {
				got := p.Field + ": " + p.Msg
				if !strings.HasPrefix(got, tc.want[i]) || strings.Contains(got, "hunter2") {
					t.Errorf("problem %d = %q, want prefix %q and no password", i, got, tc.want[i])
				}
			}
			if _, err := New(tc.c); err == nil {
				t.Error("New accepted an invalid configuration")
			}
		})
	}
}
