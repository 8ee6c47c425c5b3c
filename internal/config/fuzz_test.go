package config

import (
	"os"
	"path/filepath"
	"strings"
	"testing"
)

// fuzzEnv sets DATABASE_URL and every variable a ${NAME} reference may use,
// except UNSET; it leaves the OUTBOX_RELAY_ overrides unset so that they do
// not mask the fuzzed values (their own tests are in env_test.go).
func fuzzEnv(name string) (string, bool) {
	switch {
	case name == "DATABASE_URL":
		return "postgres://fuzz/db", true
	case name == "UNSET", strings.HasPrefix(name, envPrefix):
		return "", false
	}
	return "v" + name, true
}

func FuzzParse(f *testing.F) {
	files, _ := filepath.Glob("testdata/*.yaml")
	for _, file := range files {
		if data, err := os.ReadFile(file); err == nil {
			f.Add(data)
		}
	}
	f.Add([]byte("a: &a [*a]\n"))
	f.Add([]byte("sources: [{<<: {name: x}, table: ${UNSET}}]\n"))
	f.Add([]byte("---\n---\n"))
	f.Fuzz(func(t *testing.T, data []byte) {
		cfg, err := Parse(data, fuzzEnv)
		if err == nil && cfg.Validate() != nil {
			t.Fatalf("Parse returned a configuration that does not validate")
		}
		if (err == nil) == (cfg == nil) {
			t.Fatalf("Parse = %v, %v: want exactly one of them", cfg, err)
		}
	})
}
