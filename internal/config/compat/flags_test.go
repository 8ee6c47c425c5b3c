package compat

import (
	"strings"
	"testing"

	"github.com/spf13/cobra"
)

func TestFlagsSelectTheSettings(t *testing.T) {
	t.Parallel()
	env := func(kv ...string) func(string) (string, bool) {
		return func(name string) (string, bool) {
			for _, s := range kv {
				if k, v, _ := strings.Cut(s, "="); k == name {
					return v, true
				}
			}
			return "", false
		}
	}
	inviqa := env("DB_DRIVER=postgres", "DB_HOST=db")
	for _, c := range []struct {
		args        []string
		configGiven bool
		env         func(string) (string, bool)
		want        bool
		given       map[string]string
	}{
		{nil, false, inviqa, true, map[string]string{}},
		{nil, true, inviqa, false, map[string]string{}},
		{nil, false, env(), false, map[string]string{}},
		{[]string{"--inviqa-env"}, true, env(), true, map[string]string{}},
		{[]string{"--cleanup", "--db-host", "h", "--batch-size=5", "--kafka-tls=false"}, true, env(), true,
			map[string]string{"RUN_CLEANUP": "true", "DB_HOST": "h", "BATCH_SIZE": "5", "TLS_ENABLE": "false"}},
	} {
		cmd := &cobra.Command{Use: "run", RunE: func(*cobra.Command, []string) error { return nil }}
		f := AddFlags(cmd)
		cmd.SetArgs(c.args)
		if err := cmd.Execute(); err != nil {
			t.Fatal(err)
		}
		if got := f.Active(c.configGiven, c.env); got != c.want {
			t.Errorf("%v (config given %v): active %v, want %v", c.args, c.configGiven, got, c.want)
		}
		given := f.Given()
		if len(given) != len(c.given) {
			t.Errorf("%v: given %v, want %v", c.args, given, c.given)
		}
		for k, v := range c.given {
			if given[k] != v {
				t.Errorf("%v: %s = %q, want %q", c.args, k, given[k], v)
			}
		}
		if fl := cmd.Flags().Lookup("db-host"); fl == nil || !fl.Hidden {
			t.Error("--db-host is not a hidden flag")
		}
	}
}
