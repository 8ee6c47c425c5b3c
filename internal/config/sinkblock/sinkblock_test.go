package sinkblock

import (
	"slices"
	"testing"
	"time"
)

type fake struct{ URL string }

func (f *fake) Defaults()                 { f.URL = "x://default" }
func (f *fake) Problems() []Problem       { return nil }
func (f *fake) OwnTimeout() time.Duration { return time.Second }

func newFake() Settings { return new(fake) }

func names() []string {
	var out []string
	for _, t := range Types() {
		out = append(out, t.Name)
	}
	return out
}

func TestRegisterKeepsOrderAndLooksUpByName(t *testing.T) {
	Register(Type{Name: "zeta", New: newFake})
	Register(Type{Name: "alpha", New: newFake})
	if got := names(); !slices.Equal(got, []string{"zeta", "alpha"}) {
		t.Fatalf("Types = %v, want registration order [zeta alpha]", got)
	}
	typ, ok := Lookup("alpha")
	if !ok || typ.Name != "alpha" {
		t.Fatalf("Lookup(alpha) = %+v, %v", typ, ok)
	}
	a, b := typ.New(), typ.New()
	if a == b {
		t.Error("New returned the same block twice")
	}
	if _, ok := Lookup("kafka"); ok {
		t.Error("Lookup found a type never registered")
	}
	Types()[0].Name = "changed"
	if names()[0] != "zeta" {
		t.Error("Types let its caller change the registry")
	}
}

func TestRegisterRefusesMistakes(t *testing.T) {
	Register(Type{Name: "once", New: newFake})
	for name, typ := range map[string]Type{
		"taken name": {Name: "once", New: newFake},
		"no name":    {New: newFake},
		"no New":     {Name: "nonew"},
	} {
		func() {
			defer func() {
				if recover() == nil {
					t.Errorf("%s: Register did not panic", name)
				}
			}()
			Register(typ)
		}()
	}
}
