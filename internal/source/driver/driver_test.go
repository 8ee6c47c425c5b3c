package driver

import (
	"errors"
	"fmt"
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

// TestNoPrivilege: a dialect's privilege error marked NoPrivilege keeps
// its message and its chain, and is ErrNoPrivilege.
func TestNoPrivilege(t *testing.T) {
	inner := errors.New("insufficient privilege")
	err := NoPrivilege(fmt.Errorf("purge t: %w", inner))
	if !errors.Is(err, ErrNoPrivilege) || !errors.Is(err, inner) {
		t.Errorf("errors.Is: ErrNoPrivilege %v, inner %v", errors.Is(err, ErrNoPrivilege), errors.Is(err, inner))
	}
	if err.Error() != "purge t: insufficient privilege" {
		t.Errorf("message %q changed", err.Error())
	}
	if errors.Is(errors.New("other"), ErrNoPrivilege) {
		t.Error("an unmarked error is ErrNoPrivilege")
	}
}
