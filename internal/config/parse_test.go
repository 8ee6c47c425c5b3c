package config

import (
	"errors"
	"strings"
	"testing"
	"time"

	"gopkg.in/yaml.v3"
)

// base is a valid configuration; tests append source fields to it.
const base = `
databases:
  main: {dsn: postgres://localhost/app}
sinks:
  kafka: {type: kafka, brokers: [localhost:9092]}
sources:
  - name: orders
    table: public.outbox
`

func mustParse(t *testing.T, doc string, env map[string]string) *Config {
	t.Helper()
	cfg, err := Parse([]byte(doc), mapEnv(env))
	if err != nil {
		t.Fatalf("Parse: %v", err)
	}
	return cfg
}

func parseErr(t *testing.T, doc string) string {
	t.Helper()
	_, err := Parse([]byte(doc), nil)
	if err == nil {
		t.Fatal("Parse succeeded, want an error")
	}
	return err.Error()
}

func TestExplicitZeroIsKept(t *testing.T) {
	doc := strings.Replace(base, "brokers: [localhost:9092]", "brokers: [localhost:9092], record_retries: 0, max_message_bytes: 5", 1)
	cfg := mustParse(t, doc, nil)
	if k := cfg.Sinks["kafka"]; k.RecordRetries != 0 || k.MaxMessageBytes != 5 {
		t.Errorf("sink = %+v, want record_retries 0 kept", k)
	}

	msg := parseErr(t, base+"    max_attempts: 0\n    poll: {min: 0s}\n")
	for _, w := range []string{
		"sources[0].max_attempts: must be between 1 and 1000, got 0",
		"sources[0].poll.min: must be positive, got 0s",
	} {
		if !strings.Contains(msg, w) {
			t.Errorf("error does not contain %q:\n%s", w, msg)
		}
	}

	// A null value counts as unset.
	cfg = mustParse(t, base+"    batch_size:\n    backoff: {initial: null}\n", nil)
	if cfg.Sources[0].BatchSize != DefaultBatchSize || cfg.Sources[0].Backoff.Initial.D() != DefaultBackoffInitial {
		t.Errorf("null did not take the default: %+v", cfg.Sources[0])
	}
}

func TestAnchorsAndMergeKeys(t *testing.T) {
	doc := `
databases:
  main: {dsn: postgres://localhost/app}
sinks:
  kafka: {type: kafka, brokers: [localhost:9092]}
common: &common
  batch_size: 0
  notify: off
sources:
  - <<: *common
    name: a
    table: public.outbox
`
	// "common" is not a known key; strict decoding must say so.
	if msg := parseErr(t, doc); !strings.Contains(msg, `unknown field "common" (line 6)`) {
		t.Errorf("error = %s", msg)
	}
	doc = `
databases:
  main: {dsn: postgres://localhost/app}
sinks:
  kafka: {type: kafka, brokers: [localhost:9092]}
sources:
  - &a
    name: a
    table: public.outbox
    notify: off
    batch_size: 0
  - <<: *a
    name: b
`
	msg := parseErr(t, doc)
	for _, w := range []string{"sources[0].batch_size: must be between", "sources[1].batch_size: must be between"} {
		if !strings.Contains(msg, w) {
			t.Errorf("error does not contain %q (explicit zero through a merge key):\n%s", w, msg)
		}
	}
	if strings.Contains(msg, "notify") {
		t.Errorf("unquoted off must decode as the string \"off\":\n%s", msg)
	}
}

func TestExpansion(t *testing.T) {
	doc := strings.Replace(base, "postgres://localhost/app", `"postgres://${USER}:${PASS}@h/$db?x=$HOME&y=${}&z=${1A}"`, 1)
	cfg := mustParse(t, doc, map[string]string{"USER": "u", "PASS": ""})
	if got, want := cfg.Databases["main"].DSN, "postgres://u:@h/$db?x=$HOME&y=${}&z=${1A}"; got != want {
		t.Errorf("dsn = %q, want %q", got, want)
	}

	doc = strings.Replace(base, "name: orders", "name: ${A}-${B}", 1)
	msg := parseErr(t, doc)
	for _, w := range []string{
		`sources[0].name: environment variable "A" is not set`,
		`sources[0].name: environment variable "B" is not set`,
	} {
		if !strings.Contains(msg, w) {
			t.Errorf("error does not contain %q:\n%s", w, msg)
		}
	}

	// Lists and map values are expanded too.
	doc = strings.Replace(base, "[localhost:9092]", `["${BROKER}"]`, 1)
	cfg = mustParse(t, doc, map[string]string{"BROKER": "kafka:9093"})
	if got := cfg.Sinks["kafka"].Brokers[0]; got != "kafka:9093" {
		t.Errorf("broker = %q", got)
	}
}

func TestDecodeErrors(t *testing.T) {
	tests := []struct {
		name, doc, want string
	}{
		{"syntax", "sources: [\n", "parse config: yaml: line"},
		{"second document", base + "---\nlog: {level: info}\n", "a second YAML document is not supported"},
		{"top level list", "- a\n- b\n", "expected a mapping"},
		{"unknown top-level key", "logging: {}\n" + base, `unknown field "logging" (line 1)`},
		{"unknown nested key", strings.Replace(base, "kafka: {type", "kafka: {tipe: x, type", 1), `sinks.kafka: unknown field "tipe" (line 5)`},
		{"duration number", base + "    backoff: {max: 30}\n", `sources[0].backoff.max: invalid duration "30"`},
		{"duration mapping", "shutdown:\n  timeout: {s: 1}\n" + base, "shutdown.timeout: expected a duration"},
		{"empty", "", "sources: at least one source is required"},
		{"comments only", "# nothing\n", "sources: at least one source is required"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			if msg := parseErr(t, tt.doc); !strings.Contains(msg, tt.want) {
				t.Errorf("error does not contain %q:\n%s", tt.want, msg)
			}
		})
	}
}

func TestDecodeCollectsAllProblems(t *testing.T) {
	doc := base + "    batch_size: many\n    poll: {min: fast, max: slow}\n    extra: 1\n"
	_, err := Parse([]byte(doc), nil)
	var ve *ValidationError
	if !errors.As(err, &ve) {
		t.Fatalf("err = %v, want *ValidationError", err)
	}
	var paths []string
	for _, p := range ve.Problems {
		paths = append(paths, p.Path)
	}
	want := "sources[0].batch_size sources[0].poll.min sources[0].poll.max sources[0]"
	if got := strings.Join(paths, " "); got != want {
		t.Errorf("paths = %s, want %s\n%v", got, want, err)
	}
}

func TestValidationErrorFormat(t *testing.T) {
	one := &ValidationError{Problems: []Problem{{Path: "a.b", Message: "required"}}}
	if got := one.Error(); got != "invalid configuration: a.b: required" {
		t.Errorf("one = %q", got)
	}
	two := &ValidationError{Problems: []Problem{{Path: "a", Message: "x"}, {Message: "whole file"}}}
	if got := two.Error(); got != "invalid configuration (2 problems):\n  a: x\n  whole file" {
		t.Errorf("two = %q", got)
	}
}

func TestReferencesNeedConfiguredTargets(t *testing.T) {
	msg := parseErr(t, "sources:\n  - {name: a, table: public.outbox}\n")
	for _, w := range []string{
		"sources[0].database: required, and no databases are configured",
		"sources[0].sink: required, and no sinks are configured",
	} {
		if !strings.Contains(msg, w) {
			t.Errorf("error does not contain %q:\n%s", w, msg)
		}
	}
	doc := strings.Replace(base, "table: public.outbox", "table: public.outbox\n    sink: nope", 1)
	if msg := parseErr(t, doc); !strings.Contains(msg, `sources[0].sink: unknown sink "nope" (have: kafka)`) {
		t.Errorf("error = %s", msg)
	}
}

func TestMoreValidation(t *testing.T) {
	tests := []struct {
		name, doc, want string
	}{
		{"tls pair", strings.Replace(base, "[localhost:9092]}", "[localhost:9092], tls: {enabled: true, cert_file: c.pem}}", 1), "sinks.kafka.tls: set both cert_file and key_file, or neither"},
		{"broker with space", strings.Replace(base, "[localhost:9092]", `["a b:9092"]`, 1), `sinks.kafka.brokers[0]: must be host:port, got "a b:9092"`},
		{"discover table", strings.Replace(base, "table: public.outbox", "discover: {schemas: x, tables: [ok, a.b]}", 1), `sources[0].discover.tables[1]: invalid table name "a.b": unexpected ".b" after "a"`},
		{"discover interval", strings.Replace(base, "table: public.outbox", "discover: {schemas: x, interval: -1s}", 1), "sources[0].discover.interval: must be positive, got -1s"},
		{"negative linger", strings.Replace(base, "[localhost:9092]}", "[localhost:9092], linger: -1ms}", 1), "sinks.kafka.linger: must not be negative"},
		{"max conns", strings.Replace(base, "app}", "app, max_conns: -2}", 1), "databases.main.max_conns: must be at least 1, got -2"},
		{"database name", strings.Replace(base, "main:", "\"main db\":", 1), `databases: invalid name "main db"`},
		{"shutdown", "shutdown: {timeout: 0s}\n" + base, "shutdown.timeout: must be positive, got 0s"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			if msg := parseErr(t, tt.doc); !strings.Contains(msg, tt.want) {
				t.Errorf("error does not contain %q:\n%s", tt.want, msg)
			}
		})
	}
}

func TestApplyDefaultsAndValidateInCode(t *testing.T) {
	c := &Config{
		Databases: map[string]Database{"db": {DSN: "postgres://x"}},
		Sinks:     map[string]Sink{"k": {Type: "kafka", Brokers: []string{"k:9092"}}},
		Sources:   []Source{{Name: "s", Discover: &Discover{Schemas: "^a"}}},
	}
	shared := c.Sources[0].Discover
	c.ApplyDefaults()
	if err := c.Validate(); err != nil {
		t.Fatal(err)
	}
	s := c.Sources[0]
	if s.Database != "db" || s.Sink != "k" || s.BatchSize != 500 || !*s.Ordering || s.Discover.Interval.D() != time.Minute {
		t.Errorf("source = %+v", s)
	}
	if shared.Tables != nil {
		t.Error("ApplyDefaults wrote through the caller's Discover pointer")
	}
	if err := (&Config{}).Validate(); err == nil {
		t.Error("Validate of an empty Config succeeded")
	}
}

func TestDuration(t *testing.T) {
	var d struct {
		D Duration `yaml:"d"`
	}
	if err := yaml.Unmarshal([]byte("d: 1m30s"), &d); err != nil || d.D.D() != 90*time.Second {
		t.Fatalf("got %v, %v", d.D, err)
	}
	out, err := yaml.Marshal(d)
	if err != nil || string(out) != "d: 1m30s\n" {
		t.Errorf("Marshal = %q, %v", out, err)
	}
	if err := yaml.Unmarshal([]byte("d: 1 minute"), &d); err == nil || !strings.Contains(err.Error(), `invalid duration "1 minute"`) {
		t.Errorf("err = %v", err)
	}
}
