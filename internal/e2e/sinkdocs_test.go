package e2e

import (
	"os"
	"path/filepath"
	"reflect"
	"regexp"
	"slices"
	"strings"
	"testing"

	"gopkg.in/yaml.v3"

	"github.com/outbox-relay/outbox-relay/internal/config"
	"github.com/outbox-relay/outbox-relay/internal/config/sinkblock"
)

// sinkTypes are the sink types, each documented in docs/sinks/<type>.md.
var sinkTypes = []string{"kafka", "nats", "rabbitmq", "redis", "mqtt", "webhook"}

var (
	yamlBlock = regexp.MustCompile("(?ms)^```yaml\n(.*?)^```")
	envRef    = regexp.MustCompile(`\$\{([A-Za-z_][A-Za-z0-9_]*)\}`)
)

// TestSinkDocs keeps docs/sinks/*.md and the README's Sinks section true to
// the code: every YAML example in them loads with config.Parse (completed
// with a database and a source when it shows only sinks), each page shows
// its own type, the README shows every type, and every setting of a type's
// block (or, for Kafka, of the sink itself) is named on its page.
func TestSinkDocs(t *testing.T) {
	t.Parallel()
	for _, typ := range sinkTypes {
		t.Run(typ, func(t *testing.T) {
			doc, err := os.ReadFile("../../docs/sinks/" + typ + ".md")
			if err != nil {
				t.Fatal(err)
			}
			shown := parseExamples(t, string(doc))
			if !slices.Contains(shown, typ) {
				t.Errorf("docs/sinks/%s.md has no example of a %s sink (shows %v)", typ, typ, shown)
			}
			for _, f := range settings(typ) {
				leaf := f[strings.LastIndexByte(f, '.')+1:]
				if !strings.Contains(string(doc), "`"+f+"`") && !regexp.MustCompile(`(?m)^\s*`+regexp.QuoteMeta(leaf)+`:`).Match(doc) {
					t.Errorf("docs/sinks/%s.md does not name the setting %s", typ, f)
				}
			}
		})
	}
	t.Run("README", func(t *testing.T) {
		readme, err := os.ReadFile("../../README.md")
		if err != nil {
			t.Fatal(err)
		}
		_, section, ok := strings.Cut(string(readme), "\n### Sinks\n")
		if !ok {
			t.Fatal("README has no Sinks section")
		}
		if end := strings.Index(section, "\n## "); end >= 0 {
			section = section[:end]
		}
		if end := strings.Index(section, "\n### "); end >= 0 {
			section = section[:end]
		}
		shown := parseExamples(t, section)
		for _, typ := range sinkTypes {
			if !slices.Contains(shown, typ) {
				t.Errorf("the README's Sinks section has no example of a %s sink", typ)
			}
			if !strings.Contains(section, "(docs/sinks/"+typ+".md)") {
				t.Errorf("the README's Sinks section does not link docs/sinks/%s.md", typ)
			}
		}
	})
}

// parseExamples loads every YAML block of doc that has sinks and returns the
// sink types they show.
func parseExamples(t *testing.T, doc string) []string {
	t.Helper()
	var types []string
	for _, m := range yamlBlock.FindAllStringSubmatch(doc, -1) {
		var tree map[string]any
		if err := yaml.Unmarshal([]byte(m[1]), &tree); err != nil {
			t.Errorf("example does not parse as YAML: %v\n%s", err, m[1])
			continue
		}
		sinks, ok := tree["sinks"].(map[string]any)
		if !ok {
			continue
		}
		if _, ok := tree["databases"]; !ok {
			tree["databases"] = map[string]any{"main": map[string]any{"dsn": "postgres://relay@db:5432/app"}}
		}
		if _, ok := tree["sources"]; !ok {
			var srcs []any
			for name := range sinks {
				srcs = append(srcs, map[string]any{"name": "src-" + name, "table": "public.outbox", "preset": "delete", "sink": name})
			}
			tree["sources"] = srcs
		}
		// Files the example names (certificates, credentials) exist here.
		localFiles(tree, t.TempDir())
		whole, err := yaml.Marshal(tree)
		if err != nil {
			t.Fatal(err)
		}
		// The variables the example names are set; nothing else is.
		named := map[string]bool{}
		for _, v := range envRef.FindAllStringSubmatch(m[1], -1) {
			named[v[1]] = true
		}
		cfg, err := config.Parse(whole, func(name string) (string, bool) {
			if named[name] {
				return "app.key:secret", true
			}
			return "", false
		})
		if err != nil {
			t.Errorf("example does not load: %v\n%s", err, m[1])
			continue
		}
		for _, s := range cfg.Sinks {
			types = append(types, s.Type)
		}
	}
	return types
}

// settings lists the YAML names of a sink type's settings, nested ones as
// parent.child: the fields of its block, or for Kafka those on the sink
// itself.
func settings(typ string) []string {
	if t, ok := sinkblock.Lookup(typ); ok {
		return fieldNames("", reflect.TypeOf(t.New()))
	}
	st := reflect.TypeFor[config.Sink]()
	var out []string
	for i := range st.NumField() {
		name := yamlName(st.Field(i))
		if name == "type" || strings.HasSuffix(st.Field(i).Tag.Get("yaml"), ",inline") { // the blocks of other types
			continue
		}
		out = append(out, fieldNames(name, st.Field(i).Type)...)
	}
	return out
}

// fieldNames lists the YAML names under a field of type ft called name.
func fieldNames(name string, ft reflect.Type) []string {
	for ft.Kind() == reflect.Pointer {
		ft = ft.Elem()
	}
	if ft.Kind() != reflect.Struct || ft.NumField() == 0 || !ft.Field(0).IsExported() {
		return []string{name}
	}
	var out []string
	if name != "" {
		out = append(out, name)
	}
	for i := range ft.NumField() {
		f := ft.Field(i)
		if !f.IsExported() || yamlName(f) == "-" {
			continue
		}
		for _, sub := range fieldNames(yamlName(f), f.Type) {
			if name != "" {
				sub = strings.TrimPrefix(name+"."+sub, ".")
			}
			out = append(out, sub)
		}
	}
	return out
}

func yamlName(f reflect.StructField) string {
	name, _, _ := strings.Cut(f.Tag.Get("yaml"), ",")
	if name == "" {
		name = strings.ToLower(f.Name)
	}
	return name
}

// localFiles points every *_file setting under v at an empty file in dir,
// since the config checks that such files exist.
func localFiles(v any, dir string) {
	switch v := v.(type) {
	case map[string]any:
		for k, sub := range v {
			if _, ok := sub.(string); ok && strings.HasSuffix(k, "_file") {
				p := filepath.Join(dir, k)
				_ = os.WriteFile(p, nil, 0o600)
				v[k] = p
				continue
			}
			localFiles(sub, dir)
		}
	case []any:
		for _, sub := range v {
			localFiles(sub, dir)
		}
	}
}
