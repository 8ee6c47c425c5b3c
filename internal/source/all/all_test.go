package all

import (
	"slices"
	"testing"
	"time"

	"github.com/outbox-relay/outbox-relay/internal/config"
	"github.com/outbox-relay/outbox-relay/internal/source"
	"github.com/outbox-relay/outbox-relay/internal/source/driver"
	"github.com/outbox-relay/outbox-relay/internal/source/mysql"
	"github.com/outbox-relay/outbox-relay/internal/source/postgres"
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

// TestPurgeDefaults: the retention command's defaults are every store's.
func TestPurgeDefaults(t *testing.T) {
	for name, d := range map[string]struct {
		batch int
		lock  time.Duration
	}{
		"postgres": {postgres.DefaultPurgeBatch, postgres.DefaultPurgeLockTimeout},
		"mysql":    {mysql.DefaultPurgeBatch, mysql.DefaultPurgeLockTimeout},
	} {
		if d.batch != source.DefaultPurgeBatch || d.lock != source.DefaultPurgeLockTimeout {
			t.Errorf("%s: purge defaults %d, %s; source says %d, %s", name, d.batch, d.lock,
				source.DefaultPurgeBatch, source.DefaultPurgeLockTimeout)
		}
	}
}
