package outbox_test

import (
	"reflect"
	"strings"
	"testing"

	"github.com/outbox-relay/outbox-relay/internal/layout"
	"github.com/outbox-relay/outbox-relay/outbox"
)

// TestPresetNamesAreTheRelays: every preset but the deprecated seed names
// is named for the relay preset that reads its table, and each seed name
// is the same layout as its current name.
func TestPresetNamesAreTheRelays(t *testing.T) {
	t.Parallel()
	for name := range outbox.Presets {
		if strings.HasPrefix(name, "seed") {
			continue
		}
		if _, ok := layout.Presets[name]; !ok {
			t.Errorf("outbox preset %q names no relay preset", name)
		}
	}
	for old, name := range map[string]string{
		"seed000": "published-flag", "seed001": "status", "seed003": "payment-queue", "seed004": "kafka-outbox",
	} {
		got, ok := outbox.Presets[old]
		if !ok {
			t.Errorf("deprecated preset %q is gone", old)
			continue
		}
		if want := outbox.Presets[name]; !reflect.DeepEqual(got, want) {
			t.Errorf("preset %q = %+v, want %q's %+v", old, got, name, want)
		}
	}
}
