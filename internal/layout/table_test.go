package layout

import (
	"strings"
	"testing"
)

func TestParseTableName(t *testing.T) {
	tests := []struct {
		in, schema, table string
	}{
		{"public.outbox", "public", "outbox"},
		{"journey_matcher.outbox", "journey_matcher", "outbox"},
		{"_s1.t$2", "_s1", "t$2"},
		{`tenant."OutboxEvent"`, "tenant", "OutboxEvent"},
		{`"My Schema"."Outbox""Event"`, "My Schema", `Outbox"Event`},
		{`"a.b"."c"`, "a.b", "c"},
		{`"ünïcode".outbox`, "ünïcode", "outbox"},
		{strings.Repeat("a", 63) + ".t", strings.Repeat("a", 63), "t"},
	}
	for _, tt := range tests {
		schema, table, err := ParseTableName(tt.in)
		if err != nil || schema != tt.schema || table != tt.table {
			t.Errorf("ParseTableName(%q) = %q, %q, %v; want %q, %q", tt.in, schema, table, err, tt.schema, tt.table)
		}
	}
}

func TestParseTableNameErrors(t *testing.T) {
	tests := []struct {
		in, want string
	}{
		{"", "missing identifier"},
		{"outbox", "must be schema-qualified"},
		{"public.", "missing identifier"},
		{".outbox", `unexpected '.'`},
		{"a.b.c", "too many parts"},
		{"Public.outbox", `"Public" has upper-case letters: quote it as "Public"`},
		{"tenant.OutboxEvent", `"OutboxEvent" has upper-case letters`},
		{`tenant."Outbox`, "unterminated quoted identifier"},
		{`tenant.""`, "empty quoted identifier"},
		{`tenant."a"b`, `unexpected "b" after "a"`},
		{"1abc.outbox", `unexpected '1'`},
		{"public.out-box", `unexpected "-box"`},
		{" public.outbox", `unexpected ' '`},
		{"public .outbox", `unexpected " .outbox"`},
		{strings.Repeat("a", 64) + ".t", "longer than 63 bytes"},
		{`"` + strings.Repeat("a", 64) + `".t`, "longer than 63 bytes"},
		{"a.\"x\x00y\"", "NUL byte"},
		{"a.\"\xff\"", "not valid UTF-8"},
	}
	for _, tt := range tests {
		_, _, err := ParseTableName(tt.in)
		if err == nil {
			t.Errorf("ParseTableName(%q) succeeded, want an error containing %q", tt.in, tt.want)
			continue
		}
		if !strings.Contains(err.Error(), tt.want) || !strings.HasPrefix(err.Error(), "invalid table name ") {
			t.Errorf("ParseTableName(%q) error = %q, want it to contain %q", tt.in, err, tt.want)
		}
	}
}

func FuzzParseTableName(f *testing.F) {
	for _, s := range []string{"public.outbox", `tenant."OutboxEvent"`, `"a""b"."c"`, "a.b.c", `"x`} {
		f.Add(s)
	}
	f.Fuzz(func(t *testing.T, s string) {
		schema, table, err := ParseTableName(s)
		if err != nil {
			return
		}
		// Quoting both parts gives a name that parses back to the same pair.
		s2, t2, err := ParseTableName(quoteIdent(schema) + "." + quoteIdent(table))
		if err != nil || s2 != schema || t2 != table {
			t.Fatalf("%q: round trip gave %q, %q, %v", s, s2, t2, err)
		}
	})
}
