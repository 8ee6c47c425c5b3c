package driver

import (
	"slices"
	"testing"
)

type fakeDriver struct{ Driver }

// TestRegistry: a registered driver is found by its name, listed among
// the names, and a second registration of a name panics.
func TestRegistry(t *testing.T) {
	d := fakeDriver{}
	Register("fake-registry", d)
	if got, ok := Lookup("fake-registry"); !ok || got != Driver(d) {
		t.Fatalf("Lookup = %v, %v", got, ok)
	}
	if _, ok := Lookup("fake-missing"); ok {
		t.Error("Lookup found a driver never registered")
	}
	if !slices.Contains(Names(), "fake-registry") {
		t.Errorf("Names() = %v, without fake-registry", Names())
	}
	defer func() {
		if recover() == nil {
			t.Error("a second registration of one name did not panic")
		}
	}()
	Register("fake-registry", d)
}
