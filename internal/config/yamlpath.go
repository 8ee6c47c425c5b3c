package config

import (
	"fmt"
	"regexp"
	"strconv"
	"strings"

	"gopkg.in/yaml.v3"
)

// docIndex maps the nodes of a parsed YAML document to field paths such as
// "sources[1].backoff.initial". It turns yaml.v3's line-numbered decode
// errors into path-named problems and tells which keys the file sets.
type docIndex struct {
	entries []docEntry
	present map[string]bool // paths whose key is in the file with a non-null value
	byLine  map[int][]int   // line -> indexes of entries whose key or value is on it
}

// docEntry is one mapping value or sequence item.
type docEntry struct {
	path   string
	parent string
	key    *yaml.Node // nil for a sequence item
	value  *yaml.Node
}

// maxIndexNodes bounds the walk so that alias-heavy documents stay cheap; a
// truncated index only makes error paths and explicit-zero detection less
// precise.
const maxIndexNodes = 100_000

// indexDocument parses data (which has already decoded without a syntax
// error) and indexes its first document.
func indexDocument(data []byte) *docIndex {
	idx := &docIndex{present: map[string]bool{}}
	var root yaml.Node
	if yaml.Unmarshal(data, &root) != nil {
		return idx
	}
	w := indexWalker{idx: idx, active: map[*yaml.Node]bool{}}
	w.walk(&root, "")
	idx.byLine = map[int][]int{}
	for i, e := range idx.entries {
		idx.byLine[e.value.Line] = append(idx.byLine[e.value.Line], i)
		if e.key != nil && e.key.Line != e.value.Line {
			idx.byLine[e.key.Line] = append(idx.byLine[e.key.Line], i)
		}
	}
	return idx
}

// onLine returns the entries whose key or value is on line.
func (idx *docIndex) onLine(line int) []*docEntry {
	var es []*docEntry
	for _, i := range idx.byLine[line] {
		es = append(es, &idx.entries[i])
	}
	return es
}

// has reports whether the file sets the field at path.
func (idx *docIndex) has(path string) bool { return idx != nil && idx.present[path] }

type indexWalker struct {
	idx    *docIndex
	active map[*yaml.Node]bool // alias targets being walked, to stop cycles
	budget int
}

func (w *indexWalker) walk(n *yaml.Node, path string) {
	if n == nil || w.budget >= maxIndexNodes {
		return
	}
	w.budget++
	switch n.Kind {
	case yaml.DocumentNode:
		for _, c := range n.Content {
			w.walk(c, path)
		}
	case yaml.AliasNode:
		if n.Alias != nil && !w.active[n.Alias] {
			w.active[n.Alias] = true
			w.walk(n.Alias, path)
			delete(w.active, n.Alias)
		}
	case yaml.SequenceNode:
		for i, c := range n.Content {
			p := fmt.Sprintf("%s[%d]", path, i)
			w.idx.entries = append(w.idx.entries, docEntry{path: p, parent: path, value: c})
			w.walk(c, p)
		}
	case yaml.MappingNode:
		for i := 0; i+1 < len(n.Content); i += 2 {
			k, v := n.Content[i], n.Content[i+1]
			if k.Kind == yaml.ScalarNode && k.ShortTag() == "!!merge" {
				w.walk(v, path) // "<<: *base" merges the keys of base here
				continue
			}
			p := joinPath(path, k.Value)
			w.idx.entries = append(w.idx.entries, docEntry{path: p, parent: path, key: k, value: v})
			if !isNull(v) {
				w.idx.present[p] = true
			}
			w.walk(v, p)
		}
	}
}

func isNull(n *yaml.Node) bool {
	if n.Kind == yaml.AliasNode && n.Alias != nil {
		n = n.Alias
	}
	return n.Kind == yaml.ScalarNode && n.ShortTag() == "!!null"
}

func joinPath(parent, key string) string {
	if parent == "" {
		return key
	}
	return parent + "." + key
}

var (
	reAtColumn     = regexp.MustCompile(`^line (\d+): column (\d+): (.*)$`)
	reUnknownField = regexp.MustCompile(`^line (\d+): field (.+) not found in type \S+$`)
	reDuplicateKey = regexp.MustCompile(`^line (\d+): mapping key (".*") already defined at line (\d+)$`)
	reCannot       = regexp.MustCompile("^line (\\d+): cannot unmarshal (\\S+)(?: `(.*)`)? into (.+)$")
)

// decodeProblems rewrites the messages of a yaml.TypeError as Problems that
// name the field path. Messages it does not recognise are kept as they are.
func decodeProblems(te *yaml.TypeError, idx *docIndex) problems {
	var ps problems
	for _, msg := range te.Errors {
		if m := reAtColumn.FindStringSubmatch(msg); m != nil {
			line, col := atoi(m[1]), atoi(m[2])
			ps.add(idx.pathAt(line, col), "%s (line %d)", m[3], line)
		} else if m := reUnknownField.FindStringSubmatch(msg); m != nil {
			line := atoi(m[1])
			parent := ""
			if e := idx.keyAt(line, m[2]); e != nil {
				parent = e.parent
			}
			ps.add(parent, "unknown field %q (line %d)", m[2], line)
		} else if m := reDuplicateKey.FindStringSubmatch(msg); m != nil {
			line := atoi(m[1])
			key, err := strconv.Unquote(m[2])
			if err != nil {
				key = m[2]
			}
			path := ""
			if e := idx.keyAt(line, key); e != nil {
				path = e.path
			}
			ps.add(path, "duplicate key %q (line %d, first set at line %s)", key, line, m[3])
		} else if m := reCannot.FindStringSubmatch(msg); m != nil {
			line := atoi(m[1])
			path, value := idx.valueAt(line, m[3])
			ps.add(path, "expected %s, got %s (line %d)", goKind(m[4]), yamlKind(m[2], value), line)
		} else {
			ps.add("", "%s", msg)
		}
	}
	return ps
}

func atoi(s string) int {
	n, _ := strconv.Atoi(s)
	return n
}

// pathAt returns the path of the value node at line:col.
func (idx *docIndex) pathAt(line, col int) string {
	for _, e := range idx.onLine(line) {
		if e.value.Line == line && e.value.Column == col {
			return e.path
		}
	}
	return ""
}

// keyAt returns the entry whose key is key, on line.
func (idx *docIndex) keyAt(line int, key string) *docEntry {
	for _, e := range idx.onLine(line) {
		if e.key != nil && e.key.Line == line && e.key.Value == key {
			return e
		}
	}
	return nil
}

// valueAt returns the path and text of a value on line, preferring one whose
// text starts with prefix (yaml.v3 quotes at most the first seven
// characters). The text is prefix when no value matches.
func (idx *docIndex) valueAt(line int, prefix string) (path, value string) {
	trimmed := strings.TrimSuffix(prefix, "...")
	found := false
	for _, e := range idx.onLine(line) {
		if e.value.Line != line {
			continue
		}
		if e.value.Kind == yaml.ScalarNode && trimmed != "" && strings.HasPrefix(e.value.Value, trimmed) {
			return e.path, e.value.Value
		}
		if !found {
			path, found = e.path, true
		}
	}
	return path, prefix
}

// goKind describes a Go type named in a yaml.v3 error in YAML terms.
func goKind(typ string) string {
	typ = strings.TrimLeft(typ, "*")
	switch {
	case strings.HasPrefix(typ, "[]"):
		return "a list"
	case strings.HasPrefix(typ, "map["), strings.HasPrefix(typ, "config."):
		return "a mapping"
	case strings.HasPrefix(typ, "int"), strings.HasPrefix(typ, "uint"):
		return "an integer"
	case typ == "bool":
		return "true or false"
	case typ == "string":
		return "a string"
	}
	return typ
}

// yamlKind describes the YAML value named in a yaml.v3 error.
func yamlKind(tag, value string) string {
	switch tag {
	case "!!seq":
		return "a list"
	case "!!map":
		return "a mapping"
	}
	return strconv.Quote(value)
}
