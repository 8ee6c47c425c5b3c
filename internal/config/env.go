package config

import (
	"fmt"
	"os"
	"sort"
	"strings"
	"unicode"
)

// Environment variable names; see the package documentation.
const (
	envPrefix      = "OUTBOX_RELAY_"
	envLogLevel    = envPrefix + "LOG_LEVEL"
	envAdminListen = envPrefix + "ADMIN_LISTEN"
	envAdminToken  = envPrefix + "ADMIN_TOKEN"
	envDatabaseURL = "DATABASE_URL"
	fileSuffix     = "_FILE"
)

// DatabaseDSNEnv is the variable that overrides the dsn of database name.
func DatabaseDSNEnv(name string) string {
	return envPrefix + "DATABASE_" + envName(name) + "_DSN"
}

// SinkBrokersEnv is the variable that overrides the brokers of sink name.
func SinkBrokersEnv(name string) string {
	return envPrefix + "SINK_" + envName(name) + "_BROKERS"
}

// SinkSASLPasswordEnv is the variable that overrides the SASL password of
// sink name.
func SinkSASLPasswordEnv(name string) string {
	return envPrefix + "SINK_" + envName(name) + "_SASL_PASSWORD"
}

// envName upper-cases name and replaces everything but A-Z and 0-9 with "_".
func envName(name string) string {
	b := []byte(strings.ToUpper(name))
	for i, c := range b {
		if (c < 'A' || c > 'Z') && (c < '0' || c > '9') {
			b[i] = '_'
		}
	}
	return string(b)
}

// lookupOverride returns the value of the variable name or, failing that, the
// content of the file named by name_FILE. Empty variables count as unset.
func lookupOverride(env func(string) (string, bool), name string) (string, bool, error) {
	v, _ := env(name)
	file, _ := env(name + fileSuffix)
	switch {
	case v != "" && file != "":
		return "", false, fmt.Errorf("%s and %s%s are both set; set only one", name, name, fileSuffix)
	case v != "":
		return v, true, nil
	case file == "":
		return "", false, nil
	}
	data, err := os.ReadFile(file)
	if err != nil {
		return "", false, fmt.Errorf("%s%s: %w", name, fileSuffix, err)
	}
	v = strings.TrimRight(string(data), "\r\n")
	if v == "" {
		return "", false, fmt.Errorf("%s%s: file %s is empty", name, fileSuffix, file)
	}
	return v, true, nil
}

// overridden lists the field paths whose environment override is set, so
// that ${NAME} references in them need not resolve: `dsn: ${DATABASE_URL}`
// with only OUTBOX_RELAY_DATABASE_MAIN_DSN set is a working configuration.
func overridden(cfg *Config, env func(string) (string, bool)) map[string]bool {
	set := func(name string) bool {
		v, _ := env(name)
		f, _ := env(name + fileSuffix)
		return v != "" || f != ""
	}
	out := map[string]bool{}
	for name := range cfg.Databases {
		out["databases."+name+".dsn"] = set(DatabaseDSNEnv(name))
	}
	for name := range cfg.Sinks {
		out["sinks."+name+".brokers"] = set(SinkBrokersEnv(name))
		out["sinks."+name+".sasl.password"] = set(SinkSASLPasswordEnv(name))
	}
	out["log.level"] = set(envLogLevel)
	out["admin.listen"] = set(envAdminListen)
	out["admin.token"] = set(envAdminToken)
	return out
}

// applyEnv applies the environment overrides to cfg.
func applyEnv(cfg *Config, env func(string) (string, bool), ps *problems) {
	override := func(path, name string, set func(string)) {
		v, ok, err := lookupOverride(env, name)
		if err != nil {
			ps.add(path, "%v", err)
		} else if ok {
			set(v)
		}
	}
	// claimed detects two names that map to the same variable, which would
	// make an override ambiguous.
	claimed := map[string]string{}
	claim := func(path, kind, name, variable string) bool {
		if other, dup := claimed[variable]; dup {
			if _, ok, _ := lookupOverride(env, variable); ok {
				ps.add(path, "%s also matches %s %q; rename one of them", variable, kind, other)
			}
			return false
		}
		claimed[variable] = name
		return true
	}

	for _, name := range sortedKeys(cfg.Databases) {
		db := cfg.Databases[name]
		path := "databases." + name + ".dsn"
		if v := DatabaseDSNEnv(name); claim(path, "database", name, v) {
			override(path, v, func(s string) { db.DSN = s })
		}
		cfg.Databases[name] = db
	}
	if len(cfg.Databases) == 1 {
		for name, db := range cfg.Databases {
			if url, _ := env(envDatabaseURL); db.DSN == "" && len(db.DSNs) == 0 && url != "" {
				db.DSN = url
				cfg.Databases[name] = db
			}
		}
	}

	for _, name := range sortedKeys(cfg.Sinks) {
		sk := cfg.Sinks[name]
		path := "sinks." + name
		if v := SinkBrokersEnv(name); claim(path+".brokers", "sink", name, v) {
			override(path+".brokers", v, func(s string) {
				sk.Brokers = splitList(s)
				if len(sk.Brokers) == 0 {
					ps.add(path+".brokers", "%s lists no brokers", v)
				}
			})
		}
		if v := SinkSASLPasswordEnv(name); claim(path+".sasl.password", "sink", name, v) {
			override(path+".sasl.password", v, func(s string) {
				if sk.SASL == nil {
					sk.SASL = &SASL{}
				} else {
					copied := *sk.SASL // do not write through a pointer the caller may share
					sk.SASL = &copied
				}
				sk.SASL.Password = s
			})
		}
		cfg.Sinks[name] = sk
	}

	override("log.level", envLogLevel, func(s string) { cfg.Log.Level = s })
	override("admin.listen", envAdminListen, func(s string) { cfg.Admin.Listen = s })
	// The variable wins over the file's admin.token and admin.token_file alike.
	override("admin.token", envAdminToken, func(s string) { cfg.Admin.Token, cfg.Admin.TokenFile = s, "" })
}

// splitList splits a list separated by commas or white space (so a file may
// also hold one item per line), dropping empty items.
func splitList(s string) []string {
	return strings.FieldsFunc(s, func(r rune) bool { return r == ',' || unicode.IsSpace(r) })
}

// sortedKeys returns the keys of m in order.
func sortedKeys[V any](m map[string]V) []string {
	keys := make([]string, 0, len(m))
	for k := range m {
		keys = append(keys, k)
	}
	sort.Strings(keys)
	return keys
}

// BearerToken is admin.token, or what admin.token_file holds (its trailing
// newline dropped); "" when neither is set.
func (a Admin) BearerToken() (string, error) {
	if a.TokenFile == "" {
		return a.Token, nil
	}
	data, err := os.ReadFile(a.TokenFile)
	if err != nil {
		return "", fmt.Errorf("admin.token_file: %w", err)
	}
	t := strings.TrimRight(string(data), "\r\n")
	if t == "" {
		return "", fmt.Errorf("admin.token_file: file %s is empty", a.TokenFile)
	}
	return t, nil
}
