package rabbitmq

import (
	"strings"
	"testing"
	"time"

	"gopkg.in/yaml.v3"
)

func TestDefaults(t *testing.T) {
	t.Parallel()
	var c Config
	c.Defaults()
	if c.URL != DefaultURL || c.Mandatory == nil || !*c.Mandatory || c.ConfirmTimeout != DefaultConfirmTimeout ||
		c.ConnectTimeout != DefaultConnectTimeout || c.MaxMessageBytes != DefaultMaxMessageBytes || c.MaxInFlight != DefaultMaxInFlight {
		t.Fatalf("defaults: %+v", c)
	}
	if ps := c.Problems(); len(ps) != 0 {
		t.Fatalf("defaults have problems: %v", ps)
	}
	no := false
	c = Config{Mandatory: &no}
	c.Defaults()
	if *c.Mandatory {
		t.Fatal("mandatory: false was overridden")
	}
}

func TestYAML(t *testing.T) {
	t.Parallel()
	var c Config
	src := "url: amqps://u:p@rabbit:5671/vh\nexchange: events\nmandatory: false\nconfirm_timeout: 5s\n" +
		"max_message_bytes: 1024\ntls:\n  ca_file: /etc/ca.pem\n"
	if err := yaml.Unmarshal([]byte(src), &c); err != nil {
		t.Fatal(err)
	}
	if c.URL != "amqps://u:p@rabbit:5671/vh" || c.Exchange != "events" || *c.Mandatory || c.ConfirmTimeout != 5*time.Second ||
		c.MaxMessageBytes != 1024 || c.TLS.CAFile != "/etc/ca.pem" {
		t.Fatalf("decoded %+v", c)
	}
}

func TestProblems(t *testing.T) {
	t.Parallel()
	c := Config{
		URL: "http://nope", Exchange: strings.Repeat("e", 256), ConfirmTimeout: -1, ConnectTimeout: -1,
		MaxMessageBytes: -1, MaxInFlight: -1,
	}
	got := map[string]bool{}
	for _, p := range c.Problems() {
		got[p.Field] = true
	}
	for _, f := range []string{"url", "exchange", "confirm_timeout", "connect_timeout", "max_message_bytes", "max_in_flight"} {
		if !got[f] {
			t.Errorf("no problem for %s (got %v)", f, got)
		}
	}
	if _, err := New(c); err == nil {
		t.Error("New accepted an invalid configuration")
	}
}

func TestRoute(t *testing.T) {
	t.Parallel()
	for _, tc := range []struct {
		exchange, dest, wantEx, wantKey string
		bad                             bool
	}{
		{"", "orders/order.created", "orders", "order.created", false},
		{"", "/queue-name", "", "queue-name", false},
		{"", "a/b/c", "a", "b/c", false},
		{"", "no-exchange", "", "", true},
		{"", "x/" + strings.Repeat("k", 256), "", "", true},
		{"", "x/\xff", "", "", true},
		{"events", "order.created", "events", "order.created", false},
		{"events", "with/slash", "events", "with/slash", false},
		{"events", "", "events", "", false},
	} {
		c := Config{Exchange: tc.exchange}
		ex, key, err := c.route(tc.dest)
		if (err != nil) != tc.bad || ex != tc.wantEx || key != tc.wantKey {
			t.Errorf("exchange %q destination %q: got %q %q %v", tc.exchange, tc.dest, ex, key, err)
		}
	}
}
