package inbox_test

import (
	"os"
	"testing"
)

func TestMain(m *testing.M) {
	code := m.Run()
	for _, c := range exampleCleanups {
		c()
	}
	os.Exit(code)
}
