// Package sinkblock is the name-keyed registry of the settings blocks that
// sink types other than Kafka keep under their own key
// (sinks.<name>.rabbitmq, sinks.<name>.nats, ...). A sink package defines its
// block, with its defaults and validation; the configuration decodes,
// defaults and checks a block through this registry, by type name, without
// importing the sink or its broker client. Package sink/all registers every
// built-in type.
package sinkblock

import (
	"fmt"
	"slices"
	"sync"
	"time"
)

// Settings is a sink type's block, as a pointer to its struct: the
// configuration decodes the YAML block into it, fills its defaults, then
// validates it.
type Settings interface {
	// Defaults fills in unset fields.
	Defaults()
	// Problems reports invalid settings, each Field relative to the block.
	Problems() []Problem
	// OwnTimeout is the sink's own bound on the wait for one message's
	// confirmation (once defaults are filled in); zero when it has none.
	OwnTimeout() time.Duration
}

// Problem is one invalid setting of a block. Field is relative to the
// block ("url", "hmac.secret"); the configuration prefixes the sink's path.
type Problem struct {
	Field string
	Msg   string
}

// Type is a sink type with a block of its own.
type Type struct {
	// Name is the type's name, sinks.<name>.type, and the block's key.
	Name string
	// New returns an empty block, a pointer to the type's settings struct.
	New func() Settings
}

var (
	mu    sync.RWMutex
	types []Type // in registration order
)

// Register adds a sink type. It panics when the name is empty or taken, or
// New is nil: registration happens at init, and such a mistake is the
// program's.
func Register(t Type) {
	mu.Lock()
	defer mu.Unlock()
	if t.Name == "" || t.New == nil {
		panic("sinkblock: Register needs a name and a New function")
	}
	if slices.ContainsFunc(types, func(u Type) bool { return u.Name == t.Name }) {
		panic(fmt.Sprintf("sinkblock: type %q registered twice", t.Name))
	}
	types = append(types, t)
}

// Lookup returns the registered type called name.
func Lookup(name string) (Type, bool) {
	mu.RLock()
	defer mu.RUnlock()
	i := slices.IndexFunc(types, func(t Type) bool { return t.Name == name })
	if i < 0 {
		return Type{}, false
	}
	return types[i], true
}

// Types returns the registered types in the order they were registered.
func Types() []Type {
	mu.RLock()
	defer mu.RUnlock()
	return slices.Clone(types)
}
