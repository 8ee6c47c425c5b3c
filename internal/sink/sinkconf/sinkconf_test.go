package sinkconf

import (
	"strings"
	"testing"
	"time"

	"gopkg.in/yaml.v3"
)

func TestDurationYAML(t *testing.T) {
	var v struct {
		D Duration `yaml:"d"`
	}
	if err := yaml.Unmarshal([]byte("d: 1m30s"), &v); err != nil || v.D.D() != 90*time.Second {
		t.Fatalf("1m30s: %v %v", v.D, err)
	}
	for _, bad := range []string{"d: 5", "d: soon", "d: [1s]"} {
		err := yaml.Unmarshal([]byte(bad), &v)
		if _, ok := err.(*yaml.TypeError); !ok || !strings.Contains(err.Error(), "line 1") {
			t.Errorf("%q: got %v, want a *yaml.TypeError with the line", bad, err)
		}
	}
	out, err := yaml.Marshal(struct {
		D Duration `yaml:"d"`
	}{Duration(250 * time.Millisecond)})
	if err != nil || strings.TrimSpace(string(out)) != "d: 250ms" {
		t.Fatalf("marshal: %q %v", out, err)
	}
}
