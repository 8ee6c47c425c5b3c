package main

import (
	"os"
	"path/filepath"
	"strings"
	"testing"
)

// TestDocIsCurrent: docs/config.md is what the generator makes from the
// configuration types as they are.
func TestDocIsCurrent(t *testing.T) {
	root, err := filepath.Abs("../../..")
	if err != nil {
		t.Fatal(err)
	}
	want, err := Generate(root)
	if err != nil {
		t.Fatal(err)
	}
	got, err := os.ReadFile(filepath.Join(root, "docs", "config.md"))
	if err != nil {
		t.Fatal(err)
	}
	if string(got) != string(want) {
		gotLines, wantLines := strings.Split(string(got), "\n"), strings.Split(string(want), "\n")
		for i := range max(len(gotLines), len(wantLines)) {
			g, w := line(gotLines, i), line(wantLines, i)
			if g != w {
				t.Fatalf("docs/config.md is out of date (first difference at line %d):\n  file:      %s\n  generated: %s\n"+
					"It is generated: edit the comments in the code, then run %s", i+1, g, w, Command)
			}
		}
	}
}

func line(lines []string, i int) string {
	if i < len(lines) {
		return lines[i]
	}
	return "(end of file)"
}

// TestReference: the reference has every kind of field, with its default
// from the code, and no Go identifier.
func TestReference(t *testing.T) {
	root, err := filepath.Abs("../../..")
	if err != nil {
		t.Fatal(err)
	}
	out, err := Generate(root)
	if err != nil {
		t.Fatal(err)
	}
	doc := string(out)
	for _, want := range []string{
		"| `lease_ttl` | duration | `15s` |",
		"| `sources[].readiness.max_oldest_pending` | duration | `5m` |",
		"| `sinks.<name>.circuit.failures` | integer | `5` |",
		"| `sinks.<name>.rabbitmq.confirm_timeout` | duration | `5s` |",
		"| `sinks.<name>.nats.url` | string | required (or servers) |",
		"| `databases.<name>.dsn` | string | required (or set `OUTBOX_RELAY_DATABASE_<NAME>_DSN`) |",
		"| `sources[].layout.extra_headers` | map of names to string | none |",
		"| `sources[].layout.state.published_at` | list of string | none |",
		"| `sources[].ordering` | boolean | `true` |",
		"| `sinks.<name>.webhook.max_message_bytes` | integer | `1048576`; with preset `ably`: `65536` |",
		"| `sinks.<name>.tls.key_file` | string | none | See `sinks.<name>.tls.cert_file`. |",
		"| `OUTBOX_RELAY_ADMIN_TOKEN` | `admin.token` |",
		"| `kafka-outbox` |",
	} {
		if !strings.Contains(doc, want) {
			t.Errorf("the reference lacks %q", want)
		}
	}
	for _, goName := range []string{"MaxOldestPending", "ClaimTimeout", "RelaySchema", "internal/", "Publish call", "seed 0"} {
		if strings.Contains(doc, goName) {
			t.Errorf("the reference names %q", goName)
		}
	}
}

func TestClean(t *testing.T) {
	goNames := map[string]string{"CertFile": "cert_file", "KeyFile": "key_file", "Schema": "schema", "Sink": "sink"}
	for _, tc := range []struct{ in, want string }{
		{"CertFile and KeyFile are the client certificate", "`cert_file` and `key_file` are the client certificate"},
		{"a JSON Schema file that payloads sent to Sink must meet", "a JSON Schema file that payloads sent to `sink` must meet"},
		{"Preset names a built-in layout (see internal/layout).", "Preset names a built-in layout."},
		{"bounds one Publish call", "bounds one publish call"},
		{"Ably's API", "Ably's API"},
	} {
		if got := clean(tc.in, goNames); got != tc.want {
			t.Errorf("clean(%q) = %q, want %q", tc.in, got, tc.want)
		}
	}
}

func TestDropDefault(t *testing.T) {
	for _, tc := range []struct{ meaning, def, want string }{
		{"default 30s", "`30s`", ""},
		{"json|text, default json", "`json`", "json|text"},
		{`Where it lives. Default "outbox_relay".`, "`outbox_relay`", "Where it lives."},
		{"the pause between attempts (default 1s).", "`1s`", "the pause between attempts."},
		{"how long it waits. Default 5m.", "`5m`", "how long it waits."},
		{"Default 0 (none); a publisher keeps nothing.", "`0s`", "Default 0 (none); a publisher keeps nothing."},
		{"default 40s", "`30s`", "default 40s"}, // a stale comment stays for a reader to see
		{"Default 35s; set it above the sink's own", "`35s`", "Default 35s; set it above the sink's own"},
	} {
		if got := dropDefault(tc.meaning, tc.def); got != tc.want {
			t.Errorf("dropDefault(%q, %s) = %q, want %q", tc.meaning, tc.def, got, tc.want)
		}
	}
}
