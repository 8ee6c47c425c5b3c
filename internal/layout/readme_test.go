package layout

import (
	"os"
	"strings"
	"testing"
)

// TestReadmePresetTable keeps the README's table of what each preset reads
// equal to the presets themselves.
func TestReadmePresetTable(t *testing.T) {
	data, err := os.ReadFile("../../README.md")
	if err != nil {
		t.Fatal(err)
	}
	rows := map[string][]string{}
	for line := range strings.Lines(string(data)) {
		cells := strings.Split(strings.TrimSpace(line), "|")
		if len(cells) != 8 || !strings.HasPrefix(strings.TrimSpace(cells[1]), "`") {
			continue // not a row of the six-column table
		}
		for i := range cells {
			cells[i] = strings.TrimSpace(cells[i])
		}
		rows[strings.Trim(cells[1], "`")] = cells[3:7]
	}
	cell := func(s string) string {
		if s == "" {
			return ""
		}
		return "`" + s + "`"
	}
	for _, name := range PresetNames() {
		p := Presets[name]
		got, ok := rows[name]
		if !ok {
			t.Errorf("README: no row for preset %s in the table of what presets read", name)
			continue
		}
		want := []string{cell(p.Topic), cell(p.Key), cell(p.PartitionKey)}
		for i, w := range want {
			if got[i] != w {
				t.Errorf("README: preset %s: column %d is %q, want %q", name, i+3, got[i], w)
			}
		}
		if h := got[3]; (p.Headers == "") != (h == "") || (p.Headers != "" && !strings.HasPrefix(h, cell(p.Headers))) {
			t.Errorf("README: preset %s: headers %q, want %q", name, h, p.Headers)
		}
	}
	if len(rows) != len(Presets) {
		t.Errorf("README lists %d presets, the relay has %d", len(rows), len(Presets))
	}
}
