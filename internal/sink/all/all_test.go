package all

import (
	"reflect"
	"slices"
	"testing"

	"github.com/outbox-relay/outbox-relay/internal/config/sinkblock"
)

// TestEveryTypeRegistered: the built-in types are registered in the order
// messages list them, and each New makes a fresh, empty struct whose
// defaults fill it.
func TestEveryTypeRegistered(t *testing.T) {
	var got []string
	for _, typ := range sinkblock.Types() {
		got = append(got, typ.Name)
		a, b := typ.New(), typ.New()
		v := reflect.ValueOf(a)
		if v.Kind() != reflect.Pointer || v.Elem().Kind() != reflect.Struct {
			t.Errorf("%s: New returns %T, want a pointer to a struct", typ.Name, a)
			continue
		}
		if a == b || !v.Elem().IsZero() {
			t.Errorf("%s: New does not return a fresh, empty block", typ.Name)
		}
		a.Defaults()
		if v.Elem().IsZero() {
			t.Errorf("%s: Defaults filled nothing", typ.Name)
		}
	}
	if want := []string{"nats", "rabbitmq", "redis", "mqtt", "webhook"}; !slices.Equal(got, want) {
		t.Errorf("registered %v, want %v", got, want)
	}
}
