package main

import (
	"bytes"
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
	if !bytes.Equal(got, want) {
		t.Fatal("docs/config.md is out of date: run `make docs` (go run ./internal/config/refdoc > docs/config.md)")
	}
	// Every field of the configuration is in it, by its YAML path, and no
	// Go identifier of the configuration's types is.
	for _, path := range []string{"`sources[].readiness.max_oldest_pending`", "`sinks.<name>.circuit.failures`",
		"`sinks.<name>.rabbitmq.confirm_timeout`", "`sources[].layout.extra_headers`", "`databases.<name>.dsn`"} {
		if !strings.Contains(string(want), path) {
			t.Errorf("the reference lacks %s", path)
		}
	}
	for _, goName := range []string{"MaxOldestPending", "ClaimTimeout", "RelaySchema", "internal/"} {
		if strings.Contains(string(want), goName) {
			t.Errorf("the reference names the Go identifier %q", goName)
		}
	}
}
