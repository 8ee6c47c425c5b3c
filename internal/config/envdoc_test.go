package config

import (
	"os"
	"regexp"
	"strings"
	"testing"
)

// TestEnvOverridesDocumented: the package documentation and the comment of
// Parse (from which docs/config.md takes its table) list every environment
// override the code reads, with the field it sets.
func TestEnvOverridesDocumented(t *testing.T) {
	const name = "X"
	generic := func(v string) string { return strings.Replace(v, "_"+name+"_", "_<NAME>_", 1) }
	overrides := map[string]string{
		generic(DatabaseDSNEnv(name)):      "databases.<name>.dsn",
		generic(SinkBrokersEnv(name)):      "sinks.<name>.brokers",
		generic(SinkSASLPasswordEnv(name)): "sinks.<name>.sasl.password",
		envLogLevel:                        "log.level",
		envAdminListen:                     "admin.listen",
		envAdminToken:                      "admin.token",
	}
	for _, file := range []string{"doc.go", "load.go"} {
		data, err := os.ReadFile(file)
		if err != nil {
			t.Fatal(err)
		}
		for v, path := range overrides {
			line := regexp.MustCompile(`(?m)^//\t` + regexp.QuoteMeta(v) + ` +` + regexp.QuoteMeta(path) + `\b`)
			if !line.Match(data) {
				t.Errorf("%s does not list %s (sets %s) in its table of environment overrides", file, v, path)
			}
		}
	}
}
