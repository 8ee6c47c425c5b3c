package layout

import (
	"fmt"
	"slices"
	"strings"
)

// Part is one piece of a [Template]: a column reference when Column is set,
// else the literal text Literal. Or lists fallback columns, tried in turn
// when Column is NULL or empty ("{partition_key|aggregate_id}").
type Part struct {
	Literal string
	Column  string
	Or      []string
}

// Alternatives are the part's column and its fallbacks, in order.
func (p Part) Alternatives() []string {
	if p.Column == "" {
		return nil
	}
	return append([]string{p.Column}, p.Or...)
}

// Template is a parsed template field such as "tenant:{tenantId}": literal
// text mixed with {column} references. A reference whose column (and every
// fallback) is NULL or empty makes the whole template missing: a topic
// "billing.{entity}" with an empty entity is no topic, not "billing.". The
// zero Template renders as "".
type Template []Part

// ParseTemplate parses s. Text between braces names a column, or several
// separated by "|" (the first not NULL nor empty is used); everything else
// is literal. Braces cannot be escaped: a "}" outside a reference, a "{"
// inside one, an unclosed "{", an empty "{}" and a column name with leading
// or trailing spaces are errors. The empty string is a valid, empty template.
func ParseTemplate(s string) (Template, error) {
	var t Template
	start := 0 // start of the pending literal
	for i := 0; i < len(s); i++ {
		switch s[i] {
		case '}':
			return nil, templateError(s, "unexpected \"}\" at byte %d", i)
		case '{':
			n := strings.IndexAny(s[i+1:], "{}")
			if n < 0 {
				return nil, templateError(s, "unclosed \"{\" at byte %d", i)
			}
			end := i + 1 + n
			if s[end] == '{' {
				return nil, templateError(s, "\"{\" at byte %d inside the reference opened at byte %d", end, i)
			}
			ref := s[i+1 : end]
			if ref == "" {
				return nil, templateError(s, "empty column reference at byte %d", i)
			}
			cols := strings.Split(ref, "|")
			for _, col := range cols {
				if col == "" {
					return nil, templateError(s, "empty column name in the reference at byte %d", i)
				}
				if strings.TrimSpace(col) != col {
					return nil, templateError(s, "column name %q at byte %d has leading or trailing spaces", col, i)
				}
			}
			if i > start {
				t = append(t, Part{Literal: s[start:i]})
			}
			part := Part{Column: cols[0]}
			if len(cols) > 1 {
				part.Or = cols[1:]
			}
			t = append(t, part)
			i, start = end, end+1
		}
	}
	if start < len(s) {
		t = append(t, Part{Literal: s[start:]})
	}
	return t, nil
}

func templateError(s, format string, args ...any) error {
	return fmt.Errorf("invalid template %q: %s", s, fmt.Sprintf(format, args...))
}

// Columns returns the referenced column names, each once, in order of first
// use.
func (t Template) Columns() []string {
	var cols []string
	for _, p := range t {
		for _, c := range p.Alternatives() {
			if !slices.Contains(cols, c) {
				cols = append(cols, c)
			}
		}
	}
	return cols
}

// Render replaces each reference with lookup(column), or its first
// fallback lookup finds not empty. It returns false when a reference has
// no such column, that is when the template is missing.
func (t Template) Render(lookup func(col string) (string, bool)) (string, bool) {
	if len(t) == 1 && t[0].Column == "" {
		return t[0].Literal, true
	}
	var b strings.Builder
	for _, p := range t {
		if p.Column == "" {
			b.WriteString(p.Literal)
			continue
		}
		found := false
		for _, c := range p.Alternatives() {
			if v, ok := lookup(c); ok && v != "" {
				b.WriteString(v)
				found = true
				break
			}
		}
		if !found {
			return "", false
		}
	}
	return b.String(), true
}

// String returns the template in the form ParseTemplate reads.
func (t Template) String() string {
	var b strings.Builder
	for _, p := range t {
		if p.Column != "" {
			b.WriteString("{" + strings.Join(p.Alternatives(), "|") + "}")
		} else {
			b.WriteString(p.Literal)
		}
	}
	return b.String()
}
