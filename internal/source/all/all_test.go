package all

import (
	"slices"
	"testing"

	"github.com/outbox-relay/outbox-relay/internal/config"
	"github.com/outbox-relay/outbox-relay/internal/source/driver"
)

// TestEveryDriverRegistered: every driver a configuration may name is
// registered, the default among them.
func TestEveryDriverRegistered(t *testing.T) {
	if got, want := driver.Names(), []string{"mysql", "postgres"}; !slices.Equal(got, want) {
		t.Errorf("registered %v, want %v", got, want)
	}
	if _, ok := driver.Lookup(config.DefaultDatabaseDriver); !ok {
		t.Errorf("the default driver %q is not registered", config.DefaultDatabaseDriver)
	}
}
