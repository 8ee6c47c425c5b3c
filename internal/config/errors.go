package config

import (
	"fmt"
	"strings"
)

// Problem is one thing wrong with a configuration.
type Problem struct {
	// Path names the field, e.g. "sources[1].batch_size" or
	// "databases.main.dsn"; it is empty when the problem concerns the file as
	// a whole.
	Path    string
	Message string
	// Source is the name of the source the path is in, when it has one.
	Source string
}

// SourcePath is the path of source i in the file, "sources[1]".
func SourcePath(i int) string { return fmt.Sprintf("sources[%d]", i) }

// String formats the problem as "<path>: <message>".
func (p Problem) String() string {
	switch {
	case p.Path == "":
		return p.Message
	case p.Source != "":
		return fmt.Sprintf("source %q: %s: %s", p.Source, p.Path, p.Message)
	}
	return p.Path + ": " + p.Message
}

// ValidationError lists every problem found in a configuration. [Parse] and
// [Load] return it (wrapped by Load) for decoding, environment and
// validation problems; use errors.As to get at the list.
type ValidationError struct {
	Problems []Problem
}

// Error lists the problems, one per line when there are several.
func (e *ValidationError) Error() string {
	switch len(e.Problems) {
	case 0:
		return "invalid configuration"
	case 1:
		return "invalid configuration: " + e.Problems[0].String()
	}
	var b strings.Builder
	fmt.Fprintf(&b, "invalid configuration (%d problems):", len(e.Problems))
	for _, p := range e.Problems {
		b.WriteString("\n  ")
		b.WriteString(p.String())
	}
	return b.String()
}

// problems collects Problems in the order they are found.
type problems []Problem

func (ps *problems) add(path, format string, args ...any) {
	*ps = append(*ps, Problem{Path: path, Message: fmt.Sprintf(format, args...)})
}

// err returns the collected problems as a *ValidationError, or nil.
func (ps problems) err() error {
	if len(ps) == 0 {
		return nil
	}
	return &ValidationError{Problems: ps}
}
