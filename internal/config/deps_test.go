package config

import (
	"os/exec"
	"strings"
	"testing"
)

const module = "github.com/outbox-relay/outbox-relay"

// brokerClients are the modules of the sinks' broker clients.
var brokerClients = []string{
	"github.com/twmb/franz-go", "github.com/nats-io/", "github.com/rabbitmq/amqp091-go",
	"github.com/redis/go-redis", "github.com/eclipse/paho.golang",
}

// deps lists the packages pkg builds on, itself included, as go list does.
func deps(t *testing.T, pkg string) []string {
	t.Helper()
	if _, err := exec.LookPath("go"); err != nil {
		t.Skip("no go command:", err)
	}
	out, err := exec.Command("go", "list", "-deps", pkg).Output()
	if err != nil {
		t.Fatalf("go list -deps %s: %v", pkg, err)
	}
	return strings.Fields(string(out))
}

// TestConfigIsPlainData: the configuration builds on no broker client and
// no sink package, whatever sink types a binary registers.
func TestConfigIsPlainData(t *testing.T) {
	t.Parallel()
	for _, dep := range deps(t, module+"/internal/config") {
		if dep == module+"/internal/sink" || strings.HasPrefix(dep, module+"/internal/sink/") {
			t.Errorf("internal/config builds on the sink package %s", dep)
		}
		for _, c := range brokerClients {
			if strings.HasPrefix(dep, c) {
				t.Errorf("internal/config builds on the broker client %s", dep)
			}
		}
	}
}

// TestLayoutIsStandardLibraryOnly: the layout, which configuration and
// stores share, builds on the standard library alone.
func TestLayoutIsStandardLibraryOnly(t *testing.T) {
	t.Parallel()
	for _, dep := range deps(t, module+"/internal/layout") {
		first, _, _ := strings.Cut(dep, "/")
		if strings.Contains(first, ".") && dep != module+"/internal/layout" {
			t.Errorf("internal/layout builds on %s, beyond the standard library", dep)
		}
	}
}
