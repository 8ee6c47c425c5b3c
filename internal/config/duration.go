package config

import (
	"fmt"
	"time"

	"gopkg.in/yaml.v3"
)

// String formats the duration as time.Duration does ("1m30s").
func (d Duration) String() string { return time.Duration(d).String() }

// UnmarshalYAML accepts a Go duration string such as "250ms" or "1m30s".
// A bare number without a unit is rejected. The error is a *yaml.TypeError
// so that decoding goes on and every bad value in a file is reported;
// [Parse] rewrites it to name the field's path.
func (d *Duration) UnmarshalYAML(n *yaml.Node) error {
	if n.Kind != yaml.ScalarNode {
		return durationError(n, "expected a duration such as \"250ms\" or \"1m30s\"")
	}
	v, err := time.ParseDuration(n.Value)
	if err != nil {
		return durationError(n, fmt.Sprintf("invalid duration %q: use a number with a unit, e.g. \"250ms\" or \"1m30s\"", n.Value))
	}
	*d = Duration(v)
	return nil
}

// MarshalYAML writes the duration in the form UnmarshalYAML reads.
func (d Duration) MarshalYAML() (any, error) { return d.String(), nil }

// durationError reports a bad duration in the "line L: column C: message"
// form that decodeProblems maps back to a path.
func durationError(n *yaml.Node, msg string) error {
	return &yaml.TypeError{Errors: []string{fmt.Sprintf("line %d: column %d: %s", n.Line, n.Column, msg)}}
}
