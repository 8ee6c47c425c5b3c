package app

import (
	"os/exec"
	"strings"
	"testing"
)

const module = "github.com/outbox-relay/outbox-relay"

// dialectStores are the packages of the database dialects, which reach
// the wiring only through the driver registry.
var dialectStores = []string{
	module + "/internal/source/postgres",
	module + "/internal/source/mysql",
	module + "/internal/source/queue",
	module + "/internal/source/all",
}

// TestAppImportsNoDialect: internal/app builds on no dialect store,
// directly or through another package; a binary registers the drivers by
// importing internal/source/all.
func TestAppImportsNoDialect(t *testing.T) {
	t.Parallel()
	if _, err := exec.LookPath("go"); err != nil {
		t.Skip("no go command:", err)
	}
	out, err := exec.Command("go", "list", "-deps", module+"/internal/app").Output()
	if err != nil {
		t.Fatalf("go list -deps internal/app: %v", err)
	}
	for _, dep := range strings.Fields(string(out)) {
		for _, d := range dialectStores {
			if dep == d {
				t.Errorf("internal/app builds on the dialect package %s", dep)
			}
		}
	}
}
