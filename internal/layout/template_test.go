package layout

import (
	"reflect"
	"strings"
	"testing"
)

func TestParseTemplate(t *testing.T) {
	tests := []struct {
		in   string
		want Template
	}{
		{"", nil},
		{"orders", Template{{Literal: "orders"}}},
		{"{topic}", Template{{Column: "topic"}}},
		{"tenant:{tenantId}", Template{{Literal: "tenant:"}, {Column: "tenantId"}}},
		{"{a}{b}", Template{{Column: "a"}, {Column: "b"}}},
		{"events.{aggregate type}.v1", Template{{Literal: "events."}, {Column: "aggregate type"}, {Literal: ".v1"}}},
		{"{a}-{a}", Template{{Column: "a"}, {Literal: "-"}, {Column: "a"}}},
		{"{partition_key|aggregate_id}", Template{{Column: "partition_key", Or: []string{"aggregate_id"}}}},
		{"t.{a|b|c}", Template{{Literal: "t."}, {Column: "a", Or: []string{"b", "c"}}}},
	}
	for _, tt := range tests {
		got, err := ParseTemplate(tt.in)
		if err != nil || !reflect.DeepEqual(got, tt.want) {
			t.Errorf("ParseTemplate(%q) = %#v, %v; want %#v", tt.in, got, err, tt.want)
		}
		if got.String() != tt.in {
			t.Errorf("ParseTemplate(%q).String() = %q", tt.in, got.String())
		}
	}
}

func TestParseTemplateErrors(t *testing.T) {
	tests := []struct {
		in, want string
	}{
		{"tenant:{tenantId", `unclosed "{" at byte 7`},
		{"{", `unclosed "{" at byte 0`},
		{"a}", `unexpected "}" at byte 1`},
		{"{a}}", `unexpected "}" at byte 3`},
		{"{}", "empty column reference at byte 0"},
		{"{a{b}}", `"{" at byte 2 inside the reference opened at byte 0`},
		{"{ a}", `column name " a" at byte 0 has leading or trailing spaces`},
		{"{a|}", "empty column name in the reference at byte 0"},
		{"{|b}", "empty column name in the reference at byte 0"},
		{"x{a| b}", `column name " b" at byte 1 has leading or trailing spaces`},
	}
	for _, tt := range tests {
		_, err := ParseTemplate(tt.in)
		if err == nil || !strings.Contains(err.Error(), tt.want) || !strings.Contains(err.Error(), "invalid template") {
			t.Errorf("ParseTemplate(%q) error = %v, want it to contain %q", tt.in, err, tt.want)
		}
	}
}

func TestTemplateColumnsAndRender(t *testing.T) {
	tpl, err := ParseTemplate("{tenantId}/{aggregateId}:{tenantId}")
	if err != nil {
		t.Fatal(err)
	}
	if got := tpl.Columns(); !reflect.DeepEqual(got, []string{"tenantId", "aggregateId"}) {
		t.Errorf("Columns = %q", got)
	}
	row := map[string]string{"tenantId": "t1", "aggregateId": "a9"}
	lookup := func(col string) (string, bool) { v, ok := row[col]; return v, ok }
	if got, ok := tpl.Render(lookup); !ok || got != "t1/a9:t1" {
		t.Errorf("Render = %q, %v", got, ok)
	}

	delete(row, "aggregateId") // a NULL or missing column
	if got, ok := tpl.Render(lookup); ok || got != "" {
		t.Errorf("Render with a missing column = %q, %v; want \"\", false", got, ok)
	}

	row["aggregateId"] = "" // empty is missing too: no "t1/:t1"
	if got, ok := tpl.Render(lookup); ok || got != "" {
		t.Errorf("Render with an empty column = %q, %v; want \"\", false", got, ok)
	}

	fb, _ := ParseTemplate("billing.{entity|aggregateType}")
	if got := fb.Columns(); !reflect.DeepEqual(got, []string{"entity", "aggregateType"}) {
		t.Errorf("Columns = %q", got)
	}
	for _, tc := range []struct {
		row  map[string]string
		want string
		ok   bool
	}{
		{map[string]string{"entity": "invoice", "aggregateType": "Order"}, "billing.invoice", true},
		{map[string]string{"entity": "", "aggregateType": "Order"}, "billing.Order", true},
		{map[string]string{"aggregateType": "Order"}, "billing.Order", true},
		{map[string]string{"entity": "", "aggregateType": ""}, "", false},
	} {
		got, ok := fb.Render(func(c string) (string, bool) { v, ok := tc.row[c]; return v, ok })
		if got != tc.want || ok != tc.ok {
			t.Errorf("Render(%v) = %q, %v; want %q, %v", tc.row, got, ok, tc.want, tc.ok)
		}
	}

	static, _ := ParseTemplate("orders")
	if got, ok := static.Render(nil); !ok || got != "orders" || static.Columns() != nil {
		t.Errorf("static Render = %q, %v; Columns = %q", got, ok, static.Columns())
	}
	var empty Template
	if got, ok := empty.Render(nil); !ok || got != "" {
		t.Errorf("empty Render = %q, %v", got, ok)
	}
}

func FuzzParseTemplate(f *testing.F) {
	for _, s := range []string{"", "orders", "tenant:{tenantId}", "{a}{b}", "{", "}", "{}", "{a{b}}", "{ a }", "x{y}z", "{a|b}", "{a|}", "{|b}"} {
		f.Add(s)
	}
	f.Fuzz(func(t *testing.T, s string) {
		tpl, err := ParseTemplate(s)
		if err != nil {
			if tpl != nil {
				t.Fatalf("%q: error %v with a non-nil template", s, err)
			}
			return
		}
		if got := tpl.String(); got != s {
			t.Fatalf("String() = %q, want %q", got, s)
		}
		for i, p := range tpl {
			if (p.Column == "") == (p.Literal == "") {
				t.Fatalf("%q: part %d = %#v, want exactly one of Literal and Column", s, i, p)
			}
			if i > 0 && p.Column == "" && tpl[i-1].Column == "" {
				t.Fatalf("%q: adjacent literal parts", s)
			}
		}
		// Rendering each reference's first column as a reference gives
		// back the input without its fallbacks.
		got, ok := tpl.Render(func(col string) (string, bool) { return "{" + col + "}", true })
		var first Template
		for _, p := range tpl {
			first = append(first, Part{Literal: p.Literal, Column: p.Column})
		}
		if !ok || got != first.String() {
			t.Fatalf("Render = %q, %v; want %q", got, ok, s)
		}
		if len(tpl.Columns()) > 0 {
			if _, ok := tpl.Render(func(string) (string, bool) { return "", false }); ok {
				t.Fatalf("%q: Render succeeded with every column missing", s)
			}
		}
	})
}
