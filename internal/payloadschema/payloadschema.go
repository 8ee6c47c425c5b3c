// Package payloadschema checks event payloads against a JSON Schema before
// they are sent: a payload the schema refuses is never dispatched (the relay
// dead-letters it, with the schema's reason).
package payloadschema

import (
	"bytes"
	"fmt"
	"os"
	"path/filepath"

	"github.com/santhosh-tekuri/jsonschema/v6"
)

// Schema is a compiled JSON Schema (any draft the file declares; 2020-12
// by default).
type Schema struct {
	path string
	s    *jsonschema.Schema
}

// Load compiles the schema in the file at path.
func Load(path string) (*Schema, error) {
	abs, err := filepath.Abs(path)
	if err != nil {
		return nil, err
	}
	f, err := os.Open(abs)
	if err != nil {
		return nil, err
	}
	defer f.Close()
	doc, err := jsonschema.UnmarshalJSON(f)
	if err != nil {
		return nil, fmt.Errorf("schema %s: %w", path, err)
	}
	c := jsonschema.NewCompiler()
	if err := c.AddResource(abs, doc); err != nil {
		return nil, fmt.Errorf("schema %s: %w", path, err)
	}
	s, err := c.Compile(abs)
	if err != nil {
		return nil, fmt.Errorf("schema %s: %w", path, err)
	}
	return &Schema{path: path, s: s}, nil
}

// Validate checks a JSON payload; its error says what the schema refused.
func (s *Schema) Validate(payload []byte) error {
	v, err := jsonschema.UnmarshalJSON(bytes.NewReader(payload))
	if err != nil {
		return fmt.Errorf("payload refused by schema %s: not JSON: %w", s.path, err)
	}
	if err := s.s.Validate(v); err != nil {
		return fmt.Errorf("payload refused by schema %s: %w", s.path, err)
	}
	return nil
}
