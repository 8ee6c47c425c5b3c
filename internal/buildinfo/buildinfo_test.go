package buildinfo_test

import (
	"os"
	"os/exec"
	"path/filepath"
	"runtime"
	"strings"
	"testing"

	"github.com/outbox-relay/outbox-relay/internal/buildinfo"
)

func TestGetFallsBack(t *testing.T) {
	i := buildinfo.Get()
	if i.Version == "" || i.Commit == "" || i.BuildDate == "" || i.GoVersion != runtime.Version() {
		t.Fatalf("build info %+v: every field must be set", i)
	}
	if s := i.String(); !strings.Contains(s, i.Version) || !strings.Contains(s, runtime.Version()) {
		t.Fatalf("String() = %q", s)
	}
}

// TestMakeBuildStampsTheBinary guards the Makefile's build: the -X flags
// name this package's variables (a renamed variable or a moved package
// would leave every binary saying "dev" without an error), and the binary
// is static.
func TestMakeBuildStampsTheBinary(t *testing.T) {
	if testing.Short() {
		t.Skip("builds the binary")
	}
	if _, err := exec.LookPath("make"); err != nil {
		t.Skip("make not installed")
	}
	bin := filepath.Join(t.TempDir(), "outbox-relay")
	cmd := exec.Command("make", "-s", "build", "BIN="+bin, "VERSION=v9.8.7-test", "COMMIT=0123abcd", "BUILD_DATE=2026-01-02T03:04:05Z")
	cmd.Dir = "../.."
	cmd.Env = append(os.Environ(), "MAKEFLAGS=")
	if out, err := cmd.CombinedOutput(); err != nil {
		t.Fatalf("make build: %v\n%s", err, out)
	}
	out, err := exec.Command(bin, "--version").CombinedOutput()
	if err != nil {
		t.Fatalf("--version: %v\n%s", err, out)
	}
	want := "outbox-relay v9.8.7-test (commit 0123abcd, built 2026-01-02T03:04:05Z, " + runtime.Version()
	if !strings.HasPrefix(string(out), want) {
		t.Fatalf("--version printed %q, want it to start with %q", out, want)
	}
	if f, err := os.ReadFile(bin); err == nil && strings.Contains(string(f), "ld-linux") {
		t.Error("the binary names a dynamic loader: it is not static")
	}
}
