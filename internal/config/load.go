package config

import (
	"bytes"
	"errors"
	"fmt"
	"io"
	"os"
	"reflect"
	"regexp"
	"sort"
	"strings"

	"gopkg.in/yaml.v3"
)

// Load reads the configuration file at path and parses it with [Parse],
// taking environment variables from the process environment.
func Load(path string) (*Config, error) {
	data, err := os.ReadFile(path)
	if err != nil {
		return nil, fmt.Errorf("read config: %w", err)
	}
	cfg, err := Parse(data, os.LookupEnv)
	if err != nil {
		return nil, fmt.Errorf("config %s: %w", path, err)
	}
	return cfg, nil
}

// Parse decodes a YAML configuration, expands ${NAME} references, applies
// environment overrides and defaults, and validates the result; the package
// documentation describes each step. env looks variables up as
// os.LookupEnv does; nil means an empty environment.
//
// Environment overrides (NAME is a database or sink name, upper-cased, with
// non-alphanumerics replaced by "_"; each variable also has a _FILE variant
// naming a file that holds the value):
//
//	OUTBOX_RELAY_DATABASE_<NAME>_DSN        databases.<name>.dsn
//	OUTBOX_RELAY_SINK_<NAME>_BROKERS        sinks.<name>.brokers (comma-separated)
//	OUTBOX_RELAY_SINK_<NAME>_SASL_PASSWORD  sinks.<name>.sasl.password
//	OUTBOX_RELAY_LOG_LEVEL                  log.level
//	OUTBOX_RELAY_ADMIN_LISTEN               admin.listen
//	OUTBOX_RELAY_ADMIN_TOKEN                admin.token
//	DATABASE_URL                            the dsn of the only database, when it has none
//
// Problems in the file, in the environment or in the resulting values are
// returned together as a *ValidationError.
func Parse(data []byte, env func(string) (string, bool)) (*Config, error) {
	if env == nil {
		env = func(string) (string, bool) { return "", false }
	}
	cfg, idx, err := decode(data)
	if err != nil {
		return nil, err
	}
	var ps problems
	expandConfig(cfg, env, &ps)
	if len(ps) > 0 {
		return nil, ps.err()
	}
	applyEnv(cfg, env, &ps)
	if len(ps) > 0 {
		return nil, ps.err()
	}
	cfg.applyDefaults(idx.has)
	if err := cfg.Validate(); err != nil {
		return nil, err
	}
	return cfg, nil
}

// decode decodes data strictly into a Config and indexes the document.
func decode(data []byte) (*Config, *docIndex, error) {
	cfg := new(Config)
	dec := yaml.NewDecoder(bytes.NewReader(data))
	dec.KnownFields(true)
	err := dec.Decode(cfg)
	if errors.Is(err, io.EOF) {
		return cfg, &docIndex{}, nil // empty file: validation reports what is missing
	}
	var te *yaml.TypeError
	if errors.As(err, &te) {
		return nil, nil, &ValidationError{Problems: decodeProblems(te, indexDocument(data))}
	}
	if err != nil {
		return nil, nil, fmt.Errorf("parse config: %w", err)
	}
	var extra yaml.Node
	if err := dec.Decode(&extra); !errors.Is(err, io.EOF) {
		if err != nil {
			return nil, nil, fmt.Errorf("parse config: %w", err)
		}
		return nil, nil, fmt.Errorf("parse config: line %d: a second YAML document is not supported", extra.Line)
	}
	return cfg, indexDocument(data), nil
}

// varRef matches a ${NAME} reference.
var varRef = regexp.MustCompile(`\$\{([A-Za-z_][A-Za-z0-9_]*)\}`)

// expandConfig replaces ${NAME} references in every string of cfg.
func expandConfig(cfg *Config, env func(string) (string, bool), ps *problems) {
	skip := overridden(cfg, env)
	walkStrings(reflect.ValueOf(cfg).Elem(), "", func(path, s string) string {
		if !strings.Contains(s, "${") {
			return s
		}
		if field, _, _ := strings.Cut(path, "["); skip[field] {
			return s // the environment overrides the field: its references do not matter
		}
		return varRef.ReplaceAllStringFunc(s, func(ref string) string {
			name := ref[2 : len(ref)-1]
			v, ok := env(name)
			if !ok {
				ps.add(path, "environment variable %q is not set", name)
				return ref
			}
			return v
		})
	})
}

// walkStrings calls fn on every string reachable from v (struct fields,
// map values, slice items, pointers) and stores what it returns. path is the
// field path of v, built from yaml tag names.
func walkStrings(v reflect.Value, path string, fn func(path, s string) string) {
	switch v.Kind() {
	case reflect.Pointer, reflect.Interface: // a sink's block is a pointer in an interface
		if !v.IsNil() {
			walkStrings(v.Elem(), path, fn)
		}
	case reflect.Struct:
		t := v.Type()
		for i := range t.NumField() {
			f := t.Field(i)
			name, opts, _ := strings.Cut(f.Tag.Get("yaml"), ",")
			switch {
			case !f.IsExported() || name == "-":
				continue
			case opts == "inline": // its keys sit beside the struct's own
				walkStrings(v.Field(i), path, fn)
				continue
			case name == "":
				name = strings.ToLower(f.Name)
			}
			walkStrings(v.Field(i), joinPath(path, name), fn)
		}
	case reflect.Map:
		keys := v.MapKeys()
		sort.Slice(keys, func(i, j int) bool { return keys[i].String() < keys[j].String() })
		for _, k := range keys {
			elem := reflect.New(v.Type().Elem()).Elem()
			elem.Set(v.MapIndex(k))
			walkStrings(elem, joinPath(path, k.String()), fn)
			v.SetMapIndex(k, elem)
		}
	case reflect.Slice:
		for i := range v.Len() {
			walkStrings(v.Index(i), fmt.Sprintf("%s[%d]", path, i), fn)
		}
	case reflect.String:
		v.SetString(fn(path, v.String()))
	}
}
