// Command refdoc writes docs/config.md, the configuration reference, from the
// configuration's Go types:
//
//	go run ./internal/config/refdoc > docs/config.md   (make docs)
//
// It works in four steps, each a part of this file:
//
//  1. Parse the packages that declare the configuration's types (go/parser)
//     and walk config.Config field by field, following structs, pointers,
//     lists and maps, to a table row per field named by its YAML path
//     (sources[].layout.state.mode, sinks.<name>.rabbitmq.exchange).
//  2. Read each field's default from the code: build a sample configuration
//     with one database, one sink of each type and one source, run the
//     relay's own defaulting and validation on it, and read the value (or the
//     "required" problem) at the field's path by reflection. The few defaults
//     that depend on other settings are explained in words (derived).
//  3. Turn the field's comment into its meaning: Go field names become YAML
//     names, Go-only words are rewritten, and a "default X" that repeats the
//     default column is dropped.
//  4. Append the presets and the environment variables, and refuse to write
//     a reference in which a Go identifier of the configuration's packages
//     is left.
package main

import (
	"bytes"
	"errors"
	"fmt"
	"go/ast"
	"go/parser"
	"go/token"
	"os"
	"path/filepath"
	"reflect"
	"regexp"
	"slices"
	"strconv"
	"strings"
	"time"

	"github.com/outbox-relay/outbox-relay/internal/config"
	"github.com/outbox-relay/outbox-relay/internal/config/sinkblock"
	"github.com/outbox-relay/outbox-relay/internal/layout"
	_ "github.com/outbox-relay/outbox-relay/internal/sink/all" // every sink type's block
	"github.com/outbox-relay/outbox-relay/internal/sink/webhook"
)

// Command is how a developer regenerates the reference.
const Command = "make docs (go run ./internal/config/refdoc > docs/config.md)"

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
	"config": "internal/config", "layout": "internal/layout", "tlsconf": "internal/tlsconf",
	"sinkblock": "internal/config/sinkblock", "sinkconf": "internal/sink/sinkconf",
	"rabbitmq": "internal/sink/rabbitmq", "mqtt": "internal/sink/mqtt", "webhook": "internal/sink/webhook",
	"nats": "internal/sink/nats", "redis": "internal/sink/redis",
}

// sinkBlocks are the sink types with a block of their own
// (sinks.<name>.rabbitmq), in the order the reference lists them; Kafka's
// settings sit on the sink itself. Each must be registered with package
// sinkblock, whose registry gives its settings type.
var sinkBlocks = []string{"rabbitmq", "mqtt", "webhook", "nats", "redis"}

// derived are the defaults that the defaulting computes from other settings,
// or that the sample cannot show, in words.
var derived = map[string]string{
	"sinks.<name>.type":                  "required",
	"databases.<name>.max_conns":         "`10`; `4` for each database of an entry with `dsns` or `discover`",
	"databases.<name>.discover.pattern":  "one of `pattern` and `query` is required",
	"databases.<name>.discover.query":    "one of `pattern` and `query` is required",
	"databases.<name>.discover.interval": "`1m`",
	"sinks.<name>.webhook.preset":        "none (a plain webhook)",
	"sinks.<name>.partitioner":           "`murmur2`",
	"sinks.<name>.timeout":               "`10s`, or the sink's own delivery, confirm, publish, ack or request timeout + 5s when that is longer (`35s` for Kafka, `15s` for a webhook)",
	"sources[].database":                 "the only database; required when there are several",
	"sources[].sink":                     "the only sink; required when there are several",
	"sources[].table":                    "required, unless `discover` is set (exactly one of the two)",
	"sources[].manage_table":             "`true` for preset `kafka-outbox`, else `false`",
	"sinks.<name>.progress_topic":        "`outbox_relay_progress`",
	"sinks.<name>.transaction_timeout":   "the sink's `timeout` + 10s, at least `60s`",
	"sources[].reaper.timeout":           "`120s` for a queue (state mode `queue`)",
	"sources[].reaper.interval":          "`60s` for a queue (state mode `queue`)",
	"sources[].poll.fallback":            "`10s`; `1s` for a queue (state mode `queue`)",
	"sources[].poll.debounce":            "`0s`; `30ms` for a queue (state mode `queue`)",
	"sources[].routes[].name":            "`route0`, `route1`, … by position",
	"sinks.<name>.mqtt.client_id":        "`outbox-relay-` and 12 random hex digits",
	"sinks.<name>.webhook.url":           "required (not used by preset `ably`)",
}

// goPhrases rewrites words that only make sense to a Go programmer.
var goPhrases = strings.NewReplacer(
	"Publish calls", "publish calls",
	"Publish call", "publish call",
	"The zero value is off.", "Off unless set.",
	"the configuration loader", "the relay",
)

// row is one line of a section's table.
type row struct{ path, typ, def, meaning string }

type section struct {
	title, intro string
	rows         []row
}

// typeDecl is a parsed type declaration.
type typeDecl struct {
	pkg, name, doc string
	st             *ast.StructType // nil when the type is not a struct
	alias          ast.Expr        // for `type TLS = tlsconf.Config`
}

type generator struct {
	types    map[string]typeDecl // by "pkg.Name"
	goIdents map[string]bool     // every exported name the packages declare
	files    map[string]*ast.File
	fset     *token.FileSet
	sections []*section
	samples  samples
	// topNames maps config.Config's Go field names to YAML names, for
	// comments elsewhere that name them ("key of Sinks").
	topNames map[string]string
}

// Generate returns docs/config.md for the module at root.
func Generate(root string) ([]byte, error) {
	g := &generator{types: map[string]typeDecl{}, goIdents: map[string]bool{}, files: map[string]*ast.File{},
		topNames: map[string]string{}, samples: newSamples(), fset: token.NewFileSet()}
	for name, dir := range packages {
		if err := g.parse(name, filepath.Join(root, dir)); err != nil {
			return nil, err
		}
	}
	for _, f := range g.types["config.Config"].st.Fields.List {
		g.topNames[f.Names[0].Name] = yamlName(f)
	}
	top := &section{title: "Top level"}
	g.sections = append(g.sections, top)
	g.walk("config.Config", "", top)

	var b bytes.Buffer
	b.WriteString(header)
	for _, s := range g.sections {
		fmt.Fprintf(&b, "\n## %s\n\n", s.title)
		if s.intro != "" {
			b.WriteString(s.intro + "\n\n")
		}
		b.WriteString("| field | type | default | meaning |\n|---|---|---|---|\n")
		for _, r := range s.rows {
			fmt.Fprintf(&b, "| `%s` | %s | %s | %s |\n", r.path, r.typ, cell(r.def), cell(r.meaning))
		}
	}
	b.WriteString(g.presets())
	env, err := g.environment()
	if err != nil {
		return nil, err
	}
	b.WriteString(env)
	if leaks := g.leaks(b.String()); len(leaks) > 0 {
		return nil, fmt.Errorf("the reference would name Go identifiers %s: rewrite them in the comments or in goPhrases",
			strings.Join(leaks, ", "))
	}
	return b.Bytes(), nil
}

// ---- Step 1: the types and the walk ----

func (g *generator) parse(pkg, dir string) error {
	notTest := func(fi os.FileInfo) bool { return !strings.HasSuffix(fi.Name(), "_test.go") }
	pkgs, err := parser.ParseDir(g.fset, dir, notTest, parser.ParseComments)
	if err != nil {
		return err
	}
	for _, p := range pkgs {
		for fname, f := range p.Files {
			g.files[pkg+"/"+filepath.Base(fname)] = f
			for _, d := range f.Decls {
				switch d := d.(type) {
				case *ast.FuncDecl:
					g.ident(d.Name)
				case *ast.GenDecl:
					g.decl(pkg, d)
				}
			}
		}
	}
	return nil
}

func (g *generator) decl(pkg string, d *ast.GenDecl) {
	for _, spec := range d.Specs {
		switch s := spec.(type) {
		case *ast.ValueSpec:
			for _, n := range s.Names {
				g.ident(n)
			}
		case *ast.TypeSpec:
			g.ident(s.Name)
			doc := d.Doc.Text()
			if s.Doc != nil {
				doc = s.Doc.Text()
			}
			td := typeDecl{pkg: pkg, name: s.Name.Name, doc: doc}
			if st, ok := s.Type.(*ast.StructType); ok {
				td.st = st
				for _, f := range st.Fields.List {
					for _, n := range f.Names {
						g.ident(n)
					}
				}
			} else if s.Assign != 0 {
				td.alias = s.Type
			}
			g.types[pkg+"."+s.Name.Name] = td
		}
	}
}

func (g *generator) ident(n *ast.Ident) {
	if n.IsExported() {
		g.goIdents[n.Name] = true
	}
}

// structType returns the struct a type expression of package pkg names,
// following aliases, or false.
func (g *generator) structType(pkg string, e ast.Expr) (typeDecl, bool) {
	var key string
	switch t := e.(type) {
	case *ast.Ident:
		key = pkg + "." + t.Name
	case *ast.SelectorExpr:
		key = t.X.(*ast.Ident).Name + "." + t.Sel.Name
	default:
		return typeDecl{}, false
	}
	td, ok := g.types[key]
	if ok && td.alias != nil {
		return g.structType(td.pkg, td.alias)
	}
	return td, ok && td.st != nil
}

// walk adds the fields of struct key ("config.Source") at path to s; a
// field that is a block of its own gets a section of its own.
func (g *generator) walk(key, path string, s *section) {
	td := g.types[key]
	// Comments name fields by their Go names: this struct's and the top
	// level's.
	goNames := map[string]string{}
	for k, v := range g.topNames {
		goNames[k] = v
	}
	var fields []*ast.Field
	for _, f := range td.st.Fields.List {
		if isInline(f) {
			continue // a sink's blocks: sections of their own, below
		}
		if len(f.Names) == 1 && f.Names[0].IsExported() && f.Tag != nil && yamlName(f) != "-" {
			fields = append(fields, f)
			goNames[f.Names[0].Name] = yamlName(f)
		}
	}
	var earlier []row // this struct's rows so far, for fields that share a comment
	for _, f := range fields {
		p := join(path, yamlName(f))
		text := strings.TrimSpace(f.Doc.Text() + " " + f.Comment.Text())
		r := g.field(td.pkg, f.Type, p, clean(text, goNames), s)
		if r == nil {
			continue
		}
		if r.meaning == "" {
			r.meaning = seeAbove(yamlName(f), earlier)
		}
		r.meaning = dropDefault(r.meaning, r.def)
		if r.def == "" {
			r.def = "none"
		}
		s.rows = append(s.rows, *r)
		earlier = append(earlier, *r)
	}
	if slices.ContainsFunc(td.st.Fields.List, isInline) {
		g.sinkBlocks(path)
	}
}

// isInline reports whether a field's keys sit beside its struct's own: a
// sink's blocks, keyed by type.
func isInline(f *ast.Field) bool {
	if f.Tag == nil {
		return false
	}
	_, opts, _ := strings.Cut(reflect.StructTag(strings.Trim(f.Tag.Value, "`")).Get("yaml"), ",")
	return opts == "inline"
}

// sinkBlocks gives the block of each sink type a section of its own, at
// path.<type>, from the settings type its package registers.
func (g *generator) sinkBlocks(path string) {
	for _, name := range sinkBlocks {
		t, ok := sinkblock.Lookup(name)
		if !ok {
			panic(fmt.Sprintf("refdoc: sink type %s is not registered", name))
		}
		rt := reflect.TypeOf(t.New()).Elem()
		td, ok := g.types[filepath.Base(rt.PkgPath())+"."+rt.Name()]
		if !ok || td.st == nil {
			panic(fmt.Sprintf("refdoc: the block of sink type %s, %s, is not a struct of the parsed packages", name, rt))
		}
		g.block(td, join(path, name), "")
	}
}

// field returns the row of a field of type e at path p, or nil when the
// field is a block that got its own section.
func (g *generator) field(pkg string, e ast.Expr, p, meaning string, s *section) *row {
	switch t := e.(type) {
	case *ast.StarExpr:
		return g.field(pkg, t.X, p, meaning, s)
	case *ast.ArrayType:
		if td, ok := g.structType(pkg, t.Elt); ok {
			g.block(td, p+"[]", meaning)
			return nil
		}
		return &row{p, "list of " + scalar(t.Elt), g.defaultAt(p), meaning}
	case *ast.MapType:
		if td, ok := g.structType(pkg, t.Value); ok {
			g.block(td, p+".<name>", meaning)
			return nil
		}
		return &row{p, "map of names to " + scalar(t.Value), g.defaultAt(p), meaning}
	}
	if td, ok := g.structType(pkg, e); ok {
		g.block(td, p, meaning)
		return nil
	}
	return &row{p, scalar(e), g.defaultAt(p), meaning}
}

// block gives a struct-typed field a section of its own, introduced by the
// field's comment or, failing that, by its type's.
func (g *generator) block(td typeDecl, p, meaning string) {
	intro := meaning
	if intro == "" {
		intro = clean(dropTypeName(td.doc, td.name), g.topNames)
	}
	s := &section{title: "`" + p + "`", intro: intro}
	g.sections = append(g.sections, s)
	g.walk(td.pkg+"."+td.name, p, s)
}

// scalar names a leaf type in words.
func scalar(e ast.Expr) string {
	switch t := e.(type) {
	case *ast.StarExpr:
		return scalar(t.X)
	case *ast.SelectorExpr:
		if t.Sel.Name == "Duration" {
			return "duration"
		}
	case *ast.Ident:
		switch t.Name {
		case "string":
			return "string"
		case "bool":
			return "boolean"
		case "Duration":
			return "duration"
		case "int", "int8", "int16", "int32", "int64", "uint", "uint8", "uint16", "uint32", "uint64":
			return "integer"
		}
	}
	panic(fmt.Sprintf("refdoc: no words for type %#v; add them to scalar", e))
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

// ---- Step 2: defaults, read from the relay's own defaulting ----

// samples are configurations defaulted by the relay, and the problems its
// validation finds in them, by field path ("sinks.nats.nats.url").
type samples struct {
	plain, ably       *config.Config
	plainReq, ablyReq map[string]string
}

// newSamples builds one database, one sink of each type (named after its
// type) and one source with a route, discovery and retention, all with
// every field left unset, so that validation reports what is required.
// The ably sample is the same with the webhook sink's ably preset.
func newSamples() samples {
	build := func(webhookPreset string) (*config.Config, map[string]string) {
		cfg := &config.Config{
			Databases: map[string]config.Database{"main": {}},
			Sinks: map[string]config.Sink{
				"kafka":   {Type: "kafka", SASL: &config.SASL{}, TLS: &config.TLS{}},
				"webhook": {Type: "webhook", Blocks: config.Blocks{"webhook": &webhook.Config{Preset: webhookPreset}}},
			},
			Sources: []config.Source{{Routes: []config.Route{{}}, Discover: &config.Discover{},
				Retention: &config.Retention{}}},
		}
		for _, t := range sinkblock.Types() {
			if _, ok := cfg.Sinks[t.Name]; !ok {
				cfg.Sinks[t.Name] = config.Sink{Type: t.Name, Blocks: config.Blocks{t.Name: t.New()}}
			}
		}
		cfg.ApplyDefaults()
		required := map[string]string{}
		var verr *config.ValidationError
		if err := cfg.Validate(); errors.As(err, &verr) {
			for _, pr := range verr.Problems {
				if strings.HasPrefix(pr.Message, "required") {
					required[pr.Path] = pr.Message
				}
			}
		}
		return cfg, required
	}
	var s samples
	s.plain, s.plainReq = build("")
	s.ably, s.ablyReq = build(webhook.PresetAbly)
	return s
}

// defaultAt is the default of the field at doc path p: derived, required,
// or the value the defaulting left there.
func (g *generator) defaultAt(p string) string {
	if d, ok := derived[p]; ok {
		return d
	}
	plain := sampleDefault(g.samples.plain, g.samples.plainReq, p)
	if strings.HasPrefix(p, "sinks.<name>.webhook.") {
		if ably := sampleDefault(g.samples.ably, g.samples.ablyReq, p); ably != plain {
			return or(plain, "none") + "; with preset `ably`: " + or(ably, "none")
		}
	}
	return plain
}

func sampleDefault(cfg *config.Config, required map[string]string, p string) string {
	cp, key := concrete(p)
	if msg, ok := required[cp]; ok {
		return requiredText(msg, key)
	}
	return value(lookup(reflect.ValueOf(cfg), cp))
}

// concrete turns a doc path into the sample's path: sources[0].name,
// sinks.rabbitmq.rabbitmq.url. It returns the map key it chose, if any.
func concrete(p string) (string, string) {
	p = strings.ReplaceAll(p, "[]", "[0]")
	if rest, ok := strings.CutPrefix(p, "databases.<name>"); ok {
		return "databases.main" + rest, "main"
	}
	if rest, ok := strings.CutPrefix(p, "sinks.<name>"); ok {
		key := "kafka"
		if block, _, _ := strings.Cut(strings.TrimPrefix(rest, "."), "."); slices.Contains(sinkBlocks, block) {
			key = block
		}
		return "sinks." + key + rest, key
	}
	return p, ""
}

// requiredText shortens a validation message ("required (or set
// OUTBOX_RELAY_DATABASE_MAIN_DSN)") to the default column's words.
func requiredText(msg, key string) string {
	_, alt, ok := strings.Cut(msg, "(or ")
	if !ok {
		return "required"
	}
	alt = strings.ReplaceAll(strings.TrimSuffix(alt, ")"), "_"+strings.ToUpper(key)+"_", "_<NAME>_")
	return "required (or " + envVar.ReplaceAllString(alt, "`$0`") + ")"
}

var envVar = regexp.MustCompile(`OUTBOX_RELAY_[A-Z_<>]+`)

// lookup follows a concrete path through v by YAML names.
func lookup(v reflect.Value, p string) reflect.Value {
	for _, seg := range strings.Split(p, ".") {
		name, list := strings.CutSuffix(seg, "[0]")
		v = deref(v)
		if !v.IsValid() {
			return v
		}
		if v.Kind() == reflect.Map {
			v = v.MapIndex(reflect.ValueOf(name))
		} else {
			v = fieldByYAML(v, name)
		}
		if list {
			if v = deref(v); !v.IsValid() || v.Len() == 0 {
				return reflect.Value{}
			}
			v = v.Index(0)
		}
	}
	return deref(v)
}

func fieldByYAML(v reflect.Value, name string) reflect.Value {
	for i := range v.NumField() {
		tag, opts, _ := strings.Cut(v.Type().Field(i).Tag.Get("yaml"), ",")
		switch {
		case tag == name:
			return v.Field(i)
		case opts == "inline" && v.Field(i).Kind() == reflect.Map: // a sink's blocks
			if b := v.Field(i).MapIndex(reflect.ValueOf(name)); b.IsValid() {
				return b
			}
		}
	}
	return reflect.Value{}
}

func deref(v reflect.Value) reflect.Value {
	for v.IsValid() && (v.Kind() == reflect.Pointer || v.Kind() == reflect.Interface) {
		if v.IsNil() {
			return reflect.Value{}
		}
		v = v.Elem()
	}
	return v
}

// value writes a default as the reference shows it: `30s`, `10`, `false`,
// or "" when there is none.
func value(v reflect.Value) string {
	if !v.IsValid() {
		return ""
	}
	if v.Kind() == reflect.Int64 && v.Type().Name() == "Duration" {
		return "`" + duration(time.Duration(v.Int())) + "`"
	}
	switch v.Kind() {
	case reflect.Bool:
		return "`" + strconv.FormatBool(v.Bool()) + "`"
	case reflect.Int, reflect.Int8, reflect.Int16, reflect.Int32, reflect.Int64:
		return "`" + strconv.FormatInt(v.Int(), 10) + "`"
	case reflect.Uint, reflect.Uint8, reflect.Uint16, reflect.Uint32, reflect.Uint64:
		return "`" + strconv.FormatUint(v.Uint(), 10) + "`"
	case reflect.String:
		if v.String() == "" {
			return ""
		}
		return "`" + v.String() + "`"
	case reflect.Slice:
		var parts []string
		for i := range v.Len() {
			parts = append(parts, fmt.Sprint(v.Index(i).Interface()))
		}
		if len(parts) == 0 {
			return ""
		}
		return "`" + strings.Join(parts, ", ") + "`"
	}
	return "" // maps: no default entries
}

// duration writes d as a user would: 5m rather than 5m0s.
func duration(d time.Duration) string {
	s := d.String()
	if strings.HasSuffix(s, "m0s") {
		s = strings.TrimSuffix(s, "0s")
	}
	if strings.HasSuffix(s, "h0m") {
		s = strings.TrimSuffix(s, "0m")
	}
	return s
}

func or(s, alt string) string {
	if s == "" {
		return alt
	}
	return s
}

// ---- Step 3: meanings ----

var (
	acronym      = regexp.MustCompile(`^[A-Z]{2,}$`)
	goWord       = regexp.MustCompile(`\b[A-Z][A-Za-z0-9]*\b`)
	sourcePtr    = regexp.MustCompile(`\s*\((see )?(the )?internal/[a-z/]+[^)]*\)`)
	sourcePath   = regexp.MustCompile(`internal/[a-z/]+`)
	defaultWords = regexp.MustCompile(`[Dd]efault:? "?([^\s"(),;]*[^\s"(),;.])"?`)
)

// clean turns a Go comment into a meaning: one line, Go field names as
// YAML names, no pointers into the source tree, no Go-only words.
func clean(s string, goNames map[string]string) string {
	s = strings.Join(strings.Fields(s), " ")
	s = sourcePtr.ReplaceAllString(s, "")
	s = sourcePath.ReplaceAllString(s, "the relay")
	s = goPhrases.Replace(s)
	return replaceWords(s, func(w, prev string) string {
		y, ok := goNames[w]
		// "JSON Schema" is a name, not the field Schema.
		if !ok || acronym.MatchString(prev) {
			return w
		}
		return "`" + y + "`"
	})
}

// replaceWords calls f on every capitalised word of s with the word before it.
func replaceWords(s string, f func(word, prev string) string) string {
	var b strings.Builder
	last := 0
	for _, m := range goWord.FindAllStringIndex(s, -1) {
		if m[1] < len(s) && s[m[1]] == '\'' { // a name in prose: "Ably's API"
			continue
		}
		before := strings.Fields(s[:m[0]])
		prev := ""
		if len(before) > 0 {
			prev = before[len(before)-1]
		}
		b.WriteString(s[last:m[0]])
		b.WriteString(f(s[m[0]:m[1]], prev))
		last = m[1]
	}
	b.WriteString(s[last:])
	return b.String()
}

func dropTypeName(doc, name string) string {
	doc = strings.TrimSpace(doc)
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

// seeAbove is the meaning of a field that shares the comment of the field
// before it ("cert_file and key_file are ..."): the nearest earlier row with
// a comment of its own, if that comment names the field.
func seeAbove(name string, earlier []row) string {
	word := regexp.MustCompile("(^|[^a-z_])`?" + regexp.QuoteMeta(name) + "`?($|[^a-z_])")
	for i := len(earlier) - 1; i >= 0; i-- {
		if strings.HasPrefix(earlier[i].meaning, "See `") {
			continue
		}
		if word.MatchString(earlier[i].meaning) {
			return "See `" + earlier[i].path + "`."
		}
		break
	}
	return ""
}

// dropDefault removes a "default X" from a meaning when the default column
// says the same, so that the two cannot drift apart; a comment's default
// that differs from the code's is kept, for a reader to notice.
func dropDefault(meaning, def string) string {
	for _, m := range defaultWords.FindAllStringSubmatchIndex(meaning, -1) {
		if !sameValue(meaning[m[2]:m[3]], def) {
			continue
		}
		start, end := m[0], m[1]
		before, after := meaning[:start], meaning[end:]
		switch {
		case strings.HasSuffix(before, "(") && strings.HasPrefix(after, ")"):
			start, end = start-1, end+1
			start -= len(before[:start]) - len(strings.TrimRight(before[:start], " "))
		case strings.HasSuffix(before, ", ") && (after == "" || strings.HasPrefix(after, ".")):
			start -= 2
		case (before == "" || strings.HasSuffix(before, ". ")) && (after == "" || strings.HasPrefix(after, ".")):
			if after != "" {
				end++
			}
		default:
			continue
		}
		return dropDefault(strings.TrimSpace(meaning[:start]+meaning[end:]), def)
	}
	return meaning
}

// sameValue reports whether a comment's "default X" is the default column's.
func sameValue(said, def string) bool {
	def = strings.Trim(def, "`")
	if said == def {
		return true
	}
	a, err1 := time.ParseDuration(said)
	b, err2 := time.ParseDuration(def)
	return err1 == nil && err2 == nil && a == b
}

func cell(s string) string { return strings.ReplaceAll(s, "|", "\\|") }

// leaks lists the Go identifiers (CamelCase names the packages declare,
// and package names) that text still names.
func (g *generator) leaks(text string) []string {
	var out []string
	for _, w := range regexp.MustCompile(`[A-Za-z][A-Za-z0-9]*`).FindAllString(text, -1) {
		camel := g.goIdents[w] && regexp.MustCompile(`[a-z][A-Z]`).MatchString(w)
		if (camel || slices.Contains([]string{"tlsconf", "sinkconf", "sinkblock"}, w)) && !slices.Contains(out, w) {
			out = append(out, w)
		}
	}
	if strings.Contains(text, "internal/") {
		out = append(out, "internal/")
	}
	return out
}

// ---- Step 4: presets and the environment ----

// presets lists each preset's layout by its YAML fields, with the comment
// that introduces it in the layout package.
func (g *generator) presets() string {
	comments := map[string]string{}
	for _, f := range g.files {
		cmap := ast.NewCommentMap(g.fset, f, f.Comments)
		ast.Inspect(f, func(n ast.Node) bool {
			if kv, ok := n.(*ast.KeyValueExpr); ok {
				if lit, ok := kv.Key.(*ast.BasicLit); ok && lit.Kind == token.STRING && len(cmap[kv]) > 0 {
					name, _ := strconv.Unquote(lit.Value)
					comments[name] = cmap[kv][0].Text()
				}
			}
			return true
		})
	}
	var b strings.Builder
	b.WriteString("\n## Presets (`sources[].preset`)\n\nA preset fills `sources[].layout`; any field can be set again under `layout`.\n\n")
	b.WriteString("| preset | for | layout |\n|---|---|---|\n")
	for _, name := range layout.PresetNames() {
		what := strings.Join(strings.Fields(comments[name]), " ")
		what = strings.TrimPrefix(what, name+": ")
		what = regexp.MustCompile(`\s*\(seed [^)]*\)`).ReplaceAllString(what, "")
		if what != "" {
			what = strings.ToUpper(what[:1]) + what[1:]
		}
		var fields []string
		flatten(reflect.ValueOf(layout.Presets[name]), "", &fields)
		fmt.Fprintf(&b, "| `%s` | %s | %s |\n", name, cell(what), cell(strings.Join(fields, ", ")))
	}
	return b.String()
}

// flatten lists the set fields of a layout as `path`: `value`.
func flatten(v reflect.Value, path string, out *[]string) {
	for i := range v.NumField() {
		name, _, _ := strings.Cut(v.Type().Field(i).Tag.Get("yaml"), ",")
		f := v.Field(i)
		switch {
		case f.Kind() == reflect.Struct:
			flatten(f, join(path, name), out)
		case !f.IsZero():
			*out = append(*out, "`"+join(path, name)+"`: "+value(f))
		}
	}
}

// environment is the Environment section; its table is the list of
// overrides in the comment of config.Parse.
func (g *generator) environment() (string, error) {
	var rows []string
	for _, d := range g.files["config/load.go"].Decls {
		fd, ok := d.(*ast.FuncDecl)
		if !ok || fd.Name.Name != "Parse" {
			continue
		}
		for _, line := range strings.Split(fd.Doc.Text(), "\n") {
			name, sets, ok := strings.Cut(strings.TrimSpace(line), "  ")
			if ok && strings.HasPrefix(line, "\t") {
				rows = append(rows, fmt.Sprintf("| `%s` | %s |", name, strings.TrimSpace(sets)))
			}
		}
	}
	if len(rows) == 0 {
		return "", fmt.Errorf("no environment overrides found in the comment of config.Parse (internal/config/load.go)")
	}
	for i, r := range rows { // paths in backquotes
		rows[i] = regexp.MustCompile(`\| ([a-z_]+(\.[a-z_<>]+)+)`).ReplaceAllString(r, "| `$1`")
	}
	return environmentIntro + strings.Join(rows, "\n") + "\n" + environmentOutro, nil
}

const header = `# Configuration reference

This file is generated from the relay's configuration types by ` + "`make docs`" + `; a test fails when it is out of
date, so edit the comments in the code rather than this file.

A configuration is one YAML file (` + "`--config`" + `, default ` + "`relay.yaml`" + `). A path such as
` + "`sinks.<name>.timeout`" + ` names the field in every entry of a map (here, every sink), and ` + "`sources[]`" + ` every
item of a list. Durations are written ` + "`250ms`" + `, ` + "`30s`" + `, ` + "`5m`" + `, ` + "`1h30m`" + `. A default of "none" means the
field is empty unless set: the feature is off, or the value is optional. An unknown key is an error naming its
path and line. ` + "`${NAME}`" + ` in a string value is replaced by the environment variable NAME (see
[Environment](#environment)).
`

const environmentIntro = `
## Environment

` + "`${NAME}`" + ` in any string value of the file is replaced by the environment variable NAME, where NAME matches
` + "`[A-Za-z_][A-Za-z0-9_]*`" + `; any other ` + "`$`" + ` is kept as written, and numbers, booleans and durations are not expanded.
A reference to an unset variable is an error naming the field, unless an override below sets that field.

Overrides set a field whatever the file says. In their names, ` + "`<NAME>`" + ` is a database or sink name from the file,
upper-cased, with every character other than A-Z and 0-9 replaced by ` + "`_`" + ` (the database ` + "`billing-eu`" + ` becomes
` + "`BILLING_EU`" + `); they apply only to databases and sinks the file declares.

| variable | sets |
|---|---|
`

const environmentOutro = `
Each ` + "`OUTBOX_RELAY_`" + ` variable also has a ` + "`_FILE`" + ` variant (` + "`OUTBOX_RELAY_LOG_LEVEL_FILE`" + `, ...) whose value is the path of a
file holding the value, as mounted secrets are; trailing newlines are trimmed. Setting both a variable and its
` + "`_FILE`" + ` variant is an error; a variable set to the empty string counts as unset, and an empty file is an error.
Values taken from overrides are used as they are, never expanded. A broker list may also be separated by white
space, so a ` + "`_FILE`" + ` may hold one broker per line. An override for a sink without a ` + "`sasl`" + ` block adds one, which then
needs its ` + "`mechanism`" + ` and ` + "`username`" + ` set in the file.
`
