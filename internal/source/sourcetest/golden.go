package sourcetest

import (
	"flag"
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/outbox-relay/outbox-relay/internal/source"
)

var update = flag.Bool("update", false, "rewrite the golden SQL files")

// GoldenDir holds the SQL every store builds for every preset, one file a
// dialect and preset, relative to a store's package: a change of the SQL
// shows as a diff of these files.
const GoldenDir = "../testdata/golden"

// Golden fails when got differs from the file at path, or rewrites the file
// when the test runs with -args -update.
func Golden(t *testing.T, path, got string) {
	t.Helper()
	if *update {
		if err := os.MkdirAll(filepath.Dir(path), 0o755); err != nil {
			t.Fatal(err)
		}
		if err := os.WriteFile(path, []byte(got), 0o644); err != nil {
			t.Fatal(err)
		}
		return
	}
	want, err := os.ReadFile(path)
	if err != nil {
		t.Fatalf("%v (go test -run GoldenSQL -args -update writes it)", err)
	}
	if string(want) != got {
		t.Errorf("the SQL differs from %s (go test -run GoldenSQL -args -update rewrites it):\n%s", path, lineDiff(string(want), got))
	}
}

// GoldenDLQFilters are the dead-letter selections whose list statement the
// golden files show: none, and every filter at once.
var GoldenDLQFilters = []struct {
	Name   string
	Filter source.DLQFilter
}{
	{"no filter", source.DLQFilter{}},
	{"every filter", source.DLQFilter{IDs: []string{"1", "2"}, EventIDs: []string{"e1"}, Source: "src", EventType: "order.placed",
		Since: time.Date(2026, 1, 2, 3, 4, 5, 0, time.UTC), IncludeReplayed: false, Reason: "Timeout", Newest: true, Limit: 10}},
	{"replayed too, oldest first", source.DLQFilter{Source: "src", IncludeReplayed: true}},
}

// SQLFile collects named statements in the golden files' format.
type SQLFile struct{ b strings.Builder }

// Add appends a statement under its name; an empty one is left out.
func (f *SQLFile) Add(name, sql string) {
	if sql != "" {
		fmt.Fprintf(&f.b, "-- %s\n%s;\n\n", name, strings.TrimSpace(sql))
	}
}

func (f *SQLFile) String() string { return f.b.String() }

// lineDiff lists the first lines that differ.
func lineDiff(want, got string) string {
	w, g := strings.Split(want, "\n"), strings.Split(got, "\n")
	var out []string
	for i := 0; i < max(len(w), len(g)) && len(out) < 20; i++ {
		var a, b string
		if i < len(w) {
			a = w[i]
		}
		if i < len(g) {
			b = g[i]
		}
		if a != b {
			out = append(out, fmt.Sprintf("line %d:\n  want %s\n  got  %s", i+1, a, b))
		}
	}
	return strings.Join(out, "\n")
}
