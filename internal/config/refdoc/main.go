// Command refdoc writes docs/config.md, the configuration reference, from
// the configuration's Go types: every field by its YAML path, its type, its
// default (from the relay's own defaulting, not from comments) and what it
// means (the field's comment, with Go names turned into YAML names).
//
//	go run ./internal/config/refdoc > docs/config.md   (make docs)
package main

import (
	"bytes"
	"fmt"
	"go/ast"
	"go/parser"
	"go/token"
	"maps"
	"os"
	"path/filepath"
	"reflect"
	"regexp"
	"slices"
	"strings"
	"time"

	"github.com/outbox-relay/outbox-relay/internal/config"
	"github.com/outbox-relay/outbox-relay/internal/layout"
	"github.com/outbox-relay/outbox-relay/internal/sink/mqtt"
	"github.com/outbox-relay/outbox-relay/internal/sink/nats"
	"github.com/outbox-relay/outbox-relay/internal/sink/rabbitmq"
	"github.com/outbox-relay/outbox-relay/internal/sink/redis"
	"github.com/outbox-relay/outbox-relay/internal/sink/webhook"
)

func main() {
	root, err := moduleRoot()
	if err == nil {
		var out []byte
		if out, err = Generate(root); err == nil {
			_, err = os.Stdout.Write(out)
		}
	}
	if err != nil {
		fmt.Fprintln(os.Stderr, "refdoc:", err)
		os.Exit(1)
	}
}

// moduleRoot finds the directory holding go.mod, from the working directory up.
func moduleRoot() (string, error) {
	dir, err := os.Getwd()
	if err != nil {
		return "", err
	}
	for {
		if _, err := os.Stat(filepath.Join(dir, "go.mod")); err == nil {
			return dir, nil
		}
		parent := filepath.Dir(dir)
		if parent == dir {
			return "", fmt.Errorf("no go.mod above the working directory")
		}
		dir = parent
	}
}

// packages are the directories whose types the configuration uses, by the
// name the configuration's files import them as.
var packages = map[string]string{
	"config": "internal/config", "rabbitmq": "internal/sink/rabbitmq", "mqtt": "internal/sink/mqtt",
	"webhook": "internal/sink/webhook", "nats": "internal/sink/nats", "redis": "internal/sink/redis",
	"sinktls": "internal/sink/sinktls", "sinkconf": "internal/sink/sinkconf",
}

// typeDecl is a parsed type: a struct, or another named type (an alias or
// a scalar such as Duration).
type typeDecl struct {
	pkg string
	doc string
	st  *ast.StructType
	typ ast.Expr // when not a struct
}

// row is one line of a section's table.
type row struct{ path, typ, def, meaning string }

type generator struct {
	types    map[string]typeDecl // "pkg.Name"
	sections []section
	// fieldNames maps the top-level fields' Go names to their YAML names,
	// for comments elsewhere that name them ("key of Sinks").
	fieldNames map[string]string
}

type section struct {
	title, intro string
	rows         []row
}

// Generate returns docs/config.md for the module at root.
func Generate(root string) ([]byte, error) {
	g := &generator{types: map[string]typeDecl{}, fieldNames: map[string]string{}}
	for name, dir := range packages {
		if err := g.parse(name, filepath.Join(root, dir)); err != nil {
			return nil, err
		}
	}
	def := defaults()
	v := reflect.ValueOf(def).Elem()
	g.sections = append(g.sections, section{title: "Top level"})
	g.walk("config", "Config", "", v, &g.sections[0])
	var b bytes.Buffer
	b.WriteString(header)
	for _, s := range g.sections {
		if len(s.rows) == 0 {
			continue
		}
		fmt.Fprintf(&b, "\n## %s\n\n", s.title)
		if s.intro != "" {
			b.WriteString(s.intro + "\n\n")
		}
		b.WriteString("| field | type | default | meaning |\n|---|---|---|---|\n")
		for _, r := range s.rows {
			fmt.Fprintf(&b, "| `%s` | %s | %s | %s |\n", r.path, r.typ, r.def, cell(r.meaning))
		}
	}
	b.WriteString(presets())
	b.WriteString(environment)
	return b.Bytes(), nil
}

func (g *generator) parse(pkg, dir string) error {
	fset := token.NewFileSet()
	pkgs, err := parser.ParseDir(fset, dir, func(fi os.FileInfo) bool { return !strings.HasSuffix(fi.Name(), "_test.go") }, parser.ParseComments)
	if err != nil {
		return err
	}
	for _, p := range pkgs {
		for _, f := range p.Files {
			for _, d := range f.Decls {
				gd, ok := d.(*ast.GenDecl)
				if !ok || gd.Tok != token.TYPE {
					continue
				}
				for _, spec := range gd.Specs {
					ts := spec.(*ast.TypeSpec)
					doc := gd.Doc.Text()
					if ts.Doc != nil {
						doc = ts.Doc.Text()
					}
					td := typeDecl{pkg: pkg, doc: doc}
					if st, ok := ts.Type.(*ast.StructType); ok && ts.Assign == 0 {
						td.st = st
						if pkg == "config" && ts.Name.Name == "Config" {
							for _, f := range st.Fields.List {
								if len(f.Names) > 0 && f.Tag != nil {
									g.fieldNames[f.Names[0].Name] = yamlName(f)
								}
							}
						}
					} else {
						td.typ = ts.Type
					}
					g.types[pkg+"."+ts.Name.Name] = td
				}
			}
		}
	}
	return nil
}

// resolve follows aliases to the declaration a type expression names, in
// package pkg.
func (g *generator) resolve(pkg string, e ast.Expr) (string, typeDecl, bool) {
	var key string
	switch t := e.(type) {
	case *ast.Ident:
		key = pkg + "." + t.Name
	case *ast.SelectorExpr:
		key = t.X.(*ast.Ident).Name + "." + t.Sel.Name
	default:
		return "", typeDecl{}, false
	}
	td, ok := g.types[key]
	if ok && td.st == nil && td.typ != nil {
		if _, isSel := td.typ.(*ast.SelectorExpr); isSel {
			return g.resolve(td.pkg, td.typ) // an alias such as TLS = sinktls.Config
		}
	}
	return key, td, ok
}

// walk adds the fields of struct pkg.name at path, whose value (for
// defaults) is v, to section s; nested blocks get sections of their own.
func (g *generator) walk(pkg, name, path string, v reflect.Value, s *section) {
	td := g.types[pkg+"."+name]
	goNames := maps.Clone(g.fieldNames)
	for _, f := range td.st.Fields.List {
		if len(f.Names) == 0 || f.Tag == nil {
			continue
		}
		goNames[f.Names[0].Name] = yamlName(f)
	}
	for _, f := range td.st.Fields.List {
		if len(f.Names) == 0 || f.Tag == nil || !f.Names[0].IsExported() {
			continue
		}
		yn := yamlName(f)
		if yn == "-" {
			continue
		}
		p := join(path, yn)
		meaning := clean(strings.TrimSpace(f.Doc.Text()+" "+f.Comment.Text()), goNames)
		fv := field(v, f.Names[0].Name)
		g.field(td.pkg, f.Type, p, fv, meaning, s)
	}
}

// field adds one field (recursing into structs).
func (g *generator) field(pkg string, e ast.Expr, p string, v reflect.Value, meaning string, s *section) {
	switch t := e.(type) {
	case *ast.StarExpr:
		if v.IsValid() && v.Kind() == reflect.Pointer {
			if v.IsNil() {
				v = reflect.Value{}
			} else {
				v = v.Elem()
			}
		}
		g.field(pkg, t.X, p, v, meaning, s)
		return
	case *ast.ArrayType:
		if k, td, ok := g.resolve(pkg, t.Elt); ok && td.st != nil {
			var ev reflect.Value
			if v.IsValid() && v.Len() > 0 {
				ev = v.Index(0)
			}
			g.block(k, td, p+"[]", ev, meaning)
			return
		}
		s.rows = append(s.rows, row{p, "list of " + scalar(pkg, t.Elt, g), def(p, v), meaning})
		return
	case *ast.MapType:
		if k, td, ok := g.resolve(pkg, t.Value); ok && td.st != nil {
			var ev reflect.Value
			if v.IsValid() {
				for _, key := range v.MapKeys() {
					if !ev.IsValid() || key.String() == sampleKey(p) {
						ev = v.MapIndex(key)
					}
				}
			}
			g.block(k, td, p+".<name>", ev, meaning)
			return
		}
		s.rows = append(s.rows, row{p, "map of names to " + scalar(pkg, t.Value, g), def(p, v), meaning})
		return
	}
	if k, td, ok := g.resolve(pkg, e); ok && td.st != nil {
		g.block(k, td, p, v, meaning)
		return
	}
	s.rows = append(s.rows, row{p, scalar(pkg, e, g), def(p, v), meaning})
}

// block gives a struct-typed field a section of its own.
func (g *generator) block(key string, td typeDecl, p string, v reflect.Value, meaning string) {
	intro := meaning
	if intro == "" {
		_, name, _ := strings.Cut(key, ".")
		intro = clean(dropName(strings.TrimSpace(td.doc), name), g.fieldNames)
	}
	g.sections = append(g.sections, section{title: "`" + p + "`", intro: intro})
	i := len(g.sections) - 1
	s := g.sections[i]
	_, name, _ := strings.Cut(key, ".")
	g.walk(td.pkg, name, p, v, &s)
	g.sections[i] = s
}

// dropName turns "Config is the X block" into "The X block".
func dropName(doc, name string) string {
	rest, ok := strings.CutPrefix(doc, name+" ")
	if !ok {
		return doc
	}
	for _, verb := range []string{"is ", "are "} {
		rest = strings.TrimPrefix(rest, verb)
	}
	if rest == "" {
		return doc
	}
	return strings.ToUpper(rest[:1]) + rest[1:]
}

func scalar(pkg string, e ast.Expr, g *generator) string {
	switch t := e.(type) {
	case *ast.Ident:
		switch t.Name {
		case "string":
			return "string"
		case "int", "int64", "int32", "uint16", "uint32":
			return "integer"
		case "bool":
			return "boolean"
		case "Duration":
			return "duration (`250ms`, `1m`)"
		}
	case *ast.SelectorExpr:
		if t.Sel.Name == "Duration" {
			return "duration (`250ms`, `1m`)"
		}
	case *ast.StarExpr:
		return scalar(pkg, t.X, g)
	}
	return "value"
}

func yamlName(f *ast.Field) string {
	tag := reflect.StructTag(strings.Trim(f.Tag.Value, "`"))
	n, _, _ := strings.Cut(tag.Get("yaml"), ",")
	if n == "" {
		n = strings.ToLower(f.Names[0].Name)
	}
	return n
}

func join(path, name string) string {
	if path == "" {
		return name
	}
	return path + "." + name
}

func field(v reflect.Value, name string) reflect.Value {
	if !v.IsValid() {
		return v
	}
	return v.FieldByName(name)
}

// sampleKey is the entry of a map the defaults are read from: the sink of
// the type the block configures.
func sampleKey(p string) string {
	if strings.HasPrefix(p, "sinks") {
		return "kafka"
	}
	return "main"
}

var goWord = regexp.MustCompile(`\b[A-Z][A-Za-z0-9]*\b('s)?`)

// clean turns the Go field names of a comment into YAML names and drops
// pointers into the source tree.
func clean(s string, goNames map[string]string) string {
	s = strings.Join(strings.Fields(s), " ")
	s = regexp.MustCompile(`\s*\((see )?internal/[a-z/]+[^)]*\)`).ReplaceAllString(s, "")
	s = regexp.MustCompile(`internal/[a-z/]+`).ReplaceAllString(s, "the relay")
	return goWord.ReplaceAllStringFunc(s, func(w string) string {
		if strings.HasSuffix(w, "'s") {
			return w // a name in prose: "Ably's API"
		}
		if y, ok := goNames[w]; ok {
			return "`" + y + "`"
		}
		return w
	})
}

func cell(s string) string { return strings.ReplaceAll(s, "|", "\\|") }

// special are defaults the defaulting computes from other settings.
var special = map[string]string{
	"sinks.<name>.timeout":           "the larger of 35s and the sink's own delivery or confirm timeout + 5s",
	"sources[].database":             "the only database",
	"sources[].sink":                 "the only sink",
	"sources[].manage_table":         "true for preset kafka-outbox, else false",
	"databases.<name>.dsn":           "required (or the override variable)",
	"sinks.<name>.type":              "required",
	"sources[].name":                 "required",
	"sources[].retention.older_than": "required in a retention block",
	"sources[].routes[].sink":        "required",
	"sources[].routes[].name":        "route0, route1, …",
	"sources[].discover.tables":      "outbox, outbox_events",
	"sinks.<name>.brokers":           "required for type kafka",
	"sinks.<name>.webhook.url":       "required (but with the ably preset)",
	"sinks.<name>.mqtt.client_id":    "outbox-relay-<random>",
	"sources[].table":                "required (or discover)",
	"sources[].discover.schemas":     "required in a discover block",
}

func def(p string, v reflect.Value) string {
	if d, ok := special[p]; ok {
		return d
	}
	return value(v)
}

func value(v reflect.Value) string {
	if !v.IsValid() {
		return ""
	}
	for v.Kind() == reflect.Pointer {
		if v.IsNil() {
			return ""
		}
		v = v.Elem()
	}
	if v.IsZero() {
		if v.Kind() == reflect.Bool {
			return "`false`"
		}
		return ""
	}
	switch x := v.Interface().(type) {
	case config.Duration:
		return "`" + time.Duration(x).String() + "`"
	}
	if v.Kind() == reflect.Int64 && v.Type().Name() == "Duration" {
		return "`" + time.Duration(v.Int()).String() + "`"
	}
	switch v.Kind() {
	case reflect.Slice:
		var parts []string
		for i := range v.Len() {
			parts = append(parts, fmt.Sprint(v.Index(i).Interface()))
		}
		return "`" + strings.Join(parts, ", ") + "`"
	case reflect.Map:
		return ""
	}
	return "`" + fmt.Sprint(v.Interface()) + "`"
}

// defaults is a configuration with one database, one sink of each type and
// one source with a route, a discovery rule and retention, defaulted as the
// relay defaults a file.
func defaults() *config.Config {
	cfg := &config.Config{
		Databases: map[string]config.Database{"main": {DSN: "postgres://x"}},
		Sinks: map[string]config.Sink{
			"kafka":    {Type: "kafka", Brokers: []string{"k:9092"}},
			"rabbitmq": {Type: "rabbitmq", RabbitMQ: &rabbitmq.Config{}},
			"mqtt":     {Type: "mqtt", MQTT: &mqtt.Config{}},
			"webhook":  {Type: "webhook", Webhook: &webhook.Config{URL: "http://x"}},
			"nats":     {Type: "nats", NATS: &nats.Config{}},
			"redis":    {Type: "redis", Redis: &redis.Config{}},
		},
		Sources: []config.Source{{Name: "s", Table: "public.outbox", Sink: "kafka",
			Routes:    []config.Route{{Sink: "kafka"}},
			Discover:  &config.Discover{Schemas: ".*"},
			Retention: &config.Retention{OlderThan: config.Duration(time.Hour)}}},
	}
	cfg.ApplyDefaults()
	// Each sink block's defaults, read from its own sink.
	k := cfg.Sinks["kafka"]
	k.RabbitMQ, k.MQTT, k.Webhook, k.NATS, k.Redis = cfg.Sinks["rabbitmq"].RabbitMQ, cfg.Sinks["mqtt"].MQTT,
		cfg.Sinks["webhook"].Webhook, cfg.Sinks["nats"].NATS, cfg.Sinks["redis"].Redis
	cfg.Sinks["kafka"] = k
	return cfg
}

func presets() string {
	var b strings.Builder
	b.WriteString("\n## Presets (`sources[].preset`)\n\nEach preset sets `sources[].layout` fields; any of them can be set again under `layout`.\n\n")
	b.WriteString("| preset | id | payload | topic | key | partition key | headers | state |\n|---|---|---|---|---|---|---|---|\n")
	for _, name := range layout.PresetNames() {
		p := layout.Presets[name]
		st := p.State.Mode
		switch {
		case p.State.Status != "":
			st += " (`" + p.State.Status + "`: " + p.State.Pending + " / " + p.State.Published + " / " + p.State.Failed + ")"
		case p.State.Flag != "":
			st += " (`" + p.State.Flag + "`)"
		}
		if len(p.State.PublishedAt) > 0 {
			st += ", published at `" + strings.Join(p.State.PublishedAt, "` or `") + "`"
		}
		if p.State.Errored != "" {
			st += ", errored `" + p.State.Errored + "`"
		}
		q := func(s string) string {
			if s == "" {
				return ""
			}
			return "`" + s + "`"
		}
		fmt.Fprintf(&b, "| `%s` | %s | %s | %s | %s | %s | %s | %s |\n", name, q(p.ID), q(p.Payload), q(p.Topic), q(p.Key),
			q(p.PartitionKey), q(p.Headers), st)
	}
	return b.String()
}

var _ = slices.Sort[[]string]

const header = `# Configuration reference

This file is generated from the relay's configuration types (` + "`make docs`" + `); a test fails when it is out of date.
A configuration is one YAML file (` + "`--config`" + `, default ` + "`relay.yaml`" + `); ` + "`${NAME}`" + ` anywhere in it is replaced by the
environment variable NAME (see Environment below). Durations are written ` + "`250ms`" + `, ` + "`30s`" + `, ` + "`5m`" + `. A path such as
` + "`sinks.<name>.timeout`" + ` names the field in every entry of a map; ` + "`sources[]`" + ` every item of a list. Empty default: none (the
feature is off, or the value is optional).
`

const environment = `
## Environment

` + "`${NAME}`" + ` in the file is replaced by the variable NAME; an unset variable is an error naming the field, unless an
override below sets that field. Overrides (NAME is the database or sink name upper-cased, other characters as ` + "`_`" + `;
each has a ` + "`_FILE`" + ` variant naming a file that holds the value, for mounted secrets):

| variable | sets |
|---|---|
| ` + "`OUTBOX_RELAY_DATABASE_<NAME>_DSN`" + ` | ` + "`databases.<name>.dsn`" + ` |
| ` + "`OUTBOX_RELAY_SINK_<NAME>_BROKERS`" + ` | ` + "`sinks.<name>.brokers`" + ` (comma-separated) |
| ` + "`OUTBOX_RELAY_SINK_<NAME>_SASL_PASSWORD`" + ` | ` + "`sinks.<name>.sasl.password`" + ` |
| ` + "`OUTBOX_RELAY_LOG_LEVEL`" + ` | ` + "`log.level`" + ` |
| ` + "`OUTBOX_RELAY_ADMIN_LISTEN`" + ` | ` + "`admin.listen`" + ` |
| ` + "`OUTBOX_RELAY_ADMIN_TOKEN`" + ` | ` + "`admin.token`" + ` (wins over ` + "`admin.token_file`" + ` too) |
| ` + "`DATABASE_URL`" + ` | the dsn of the only database, when the file gives none |
`
