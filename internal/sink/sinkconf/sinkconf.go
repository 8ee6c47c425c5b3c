// Package sinkconf holds configuration pieces that sinks share: a Duration
// written as "250ms" or "1m30s", which refuses a bare number (a
// time.Duration would read "5" as five nanoseconds).
package sinkconf

import (
	"fmt"
	"time"

	"gopkg.in/yaml.v3"
)

// Duration is a time.Duration written in YAML as a Go duration ("250ms",
// "1m30s"). A bare number is refused: "5" would otherwise mean nanoseconds.
type Duration time.Duration

// D returns the value as a time.Duration.
func (d Duration) D() time.Duration { return time.Duration(d) }

// String formats the duration as time.Duration does.
func (d Duration) String() string { return time.Duration(d).String() }

// UnmarshalYAML reads a Go duration string. The error is a *yaml.TypeError
// with the node's line and column, so decoding goes on and the caller can
// name the field.
func (d *Duration) UnmarshalYAML(n *yaml.Node) error {
	if n.Kind != yaml.ScalarNode {
		return durationError(n, `expected a duration such as "250ms" or "1m30s"`)
	}
	v, err := time.ParseDuration(n.Value)
	if err != nil {
		return durationError(n, fmt.Sprintf(`invalid duration %q: use a number with a unit, e.g. "250ms" or "1m30s"`, n.Value))
	}
	*d = Duration(v)
	return nil
}

// MarshalYAML writes the duration in the form UnmarshalYAML reads.
func (d Duration) MarshalYAML() (any, error) { return d.String(), nil }

func durationError(n *yaml.Node, msg string) error {
	return &yaml.TypeError{Errors: []string{fmt.Sprintf("line %d: column %d: %s", n.Line, n.Column, msg)}}
}
