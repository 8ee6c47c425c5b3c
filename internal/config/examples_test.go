package config

import (
	"path/filepath"
	"testing"
)

// The examples shipped beside the code must load.
func TestExamplesLoad(t *testing.T) {
	files, err := filepath.Glob("../../examples/*.yaml")
	if err != nil || len(files) == 0 {
		t.Fatalf("no examples found: %v", err)
	}
	for _, f := range files {
		t.Setenv("DATABASE_URL", "postgres://relay@localhost:5432/app")
		if _, err := Load(f); err != nil {
			t.Errorf("%s: %v", f, err)
		}
	}
}
