package config

import (
	"fmt"
	"net"
	"net/url"
	"sort"
	"strconv"
	"strings"
	"time"

	"github.com/outbox-relay/outbox-relay/internal/layout"
)

// Inviqa is a configuration built from the settings of an
// inviqa/kafka-outbox-relay deployment, with what the process is to do.
type Inviqa struct {
	// Config relays kafka_outbox (preset kafka-outbox) of each database
	// named by DB_NAME to the Kafka sink "kafka"; defaults are applied and
	// it is valid.
	Config *Config
	// Job is "cleanup" or "optimize" for a one-shot job (RUN_CLEANUP,
	// RUN_OPTIMIZE), "" to relay.
	Job string
	// SidecarProxyURL, when set, is told to quit after a one-shot job.
	SidecarProxyURL string
	// PollingDisabled asks for no relaying at all (POLLING_DISABLED).
	PollingDisabled bool
	// Notes are the settings accepted without effect, each with the reason,
	// for the log.
	Notes []InviqaNote
}

// InviqaNote is a setting that is accepted but has no effect here.
type InviqaNote struct {
	Var    string
	Reason string
}

// Jobs of inviqa/kafka-outbox-relay.
const (
	InviqaJobCleanup  = "cleanup"
	InviqaJobOptimize = "optimize"
)

// FromInviqa builds the configuration of an inviqa/kafka-outbox-relay
// deployment. environ holds the process environment as KEY=VALUE strings
// (os.Environ); flags holds the values given on the command line, keyed by
// variable name, and takes precedence over environ. The environment
// overrides of [Parse] (OUTBOX_RELAY_LOG_LEVEL, OUTBOX_RELAY_ADMIN_LISTEN,
// OUTBOX_RELAY_DATABASE_<DB>_DSN, OUTBOX_RELAY_SINK_KAFKA_BROKERS, ...)
// apply on top. A bad value is reported as a *ValidationError whose problem
// names the variable.
func FromInviqa(environ []string, flags map[string]string) (*Inviqa, error) {
	in, ps := buildInviqa(environ, flags)
	if len(ps) > 0 {
		return nil, ps.err()
	}
	if err := in.Config.Validate(); err != nil {
		return nil, err
	}
	return in, nil
}

// inviqaEnv reads variables: flags first, then the environment. Empty values
// count as unset.
type inviqaEnv struct {
	vars  map[string]string
	flags map[string]string
	ps    *problems
}

func (e inviqaEnv) lookup(name string) (string, bool) {
	if v, ok := e.flags[name]; ok && v != "" {
		return v, true
	}
	v, ok := e.vars[name]
	return v, ok && v != ""
}

func (e inviqaEnv) str(name string) string {
	v, _ := e.lookup(name)
	return strings.TrimSpace(v)
}

func (e inviqaEnv) boolean(name string) (value, set bool) {
	v := e.str(name)
	if v == "" {
		return false, false
	}
	b, err := strconv.ParseBool(v)
	if err != nil {
		e.ps.add(name, "must be true or false, got %q", v)
		return false, false
	}
	return b, true
}

// integer returns the value of name, def when unset, reporting a value
// outside lo..hi.
func (e inviqaEnv) integer(name string, def, lo, hi int) int {
	v := e.str(name)
	if v == "" {
		return def
	}
	n, err := strconv.Atoi(v)
	if err != nil || n < lo || n > hi {
		e.ps.add(name, "must be a whole number between %d and %d, got %q", lo, hi, v)
		return def
	}
	return n
}

// buildInviqa builds the configuration, defaults applied, without validating
// it.
func buildInviqa(environ []string, flags map[string]string) (*Inviqa, problems) {
	var ps problems
	e := inviqaEnv{vars: map[string]string{}, flags: flags, ps: &ps}
	for _, kv := range environ {
		if k, v, ok := strings.Cut(kv, "="); ok {
			e.vars[k] = v
		}
	}
	in := &Inviqa{}
	cfg := &Config{
		Admin:     Admin{Listen: InviqaAdminListen},
		Databases: map[string]Database{},
		Sinks:     map[string]Sink{},
	}
	in.Config = cfg

	in.PollingDisabled, _ = e.boolean(InviqaPollingDisabled)
	cleanup, _ := e.boolean(InviqaRunCleanup)
	optimize, _ := e.boolean(InviqaRunOptimize)
	switch {
	case cleanup && optimize:
		ps.add(InviqaRunOptimize, "set only one of %s and %s", InviqaRunCleanup, InviqaRunOptimize)
	case cleanup:
		in.Job = InviqaJobCleanup
	case optimize:
		in.Job = InviqaJobOptimize
	}
	in.SidecarProxyURL = e.str(InviqaSidecarProxyURL)
	if u := in.SidecarProxyURL; u != "" {
		if p, err := url.Parse(u); err != nil || (p.Scheme != "http" && p.Scheme != "https") || p.Host == "" {
			ps.add(InviqaSidecarProxyURL, "must be an http(s) URL, got %q", u)
		} else if in.Job == "" {
			in.Notes = append(in.Notes, InviqaNote{InviqaSidecarProxyURL,
				"used only to stop the proxy sidecar after a one-shot job (RUN_CLEANUP, RUN_OPTIMIZE)"})
		}
	}

	if lvl := e.str(InviqaLogLevel); lvl != "" {
		if l, ok := inviqaLogLevel(lvl); ok {
			cfg.Log.Level = l
		} else {
			ps.add(InviqaLogLevel, "must be one of trace, debug, info, warn, warning, error, fatal, panic, got %q", lvl)
		}
	}
	manage := inviqaManageTable(e)
	tls, _ := e.boolean(InviqaTLSEnable)
	skipVerify, _ := e.boolean(InviqaTLSSkipVerifyPeer)

	// gzip as the original producer sends; sarama's partitioner keeps each
	// key on the partition the original put it on.
	sk := Sink{Type: "kafka", Compression: "gzip", Partitioner: "sarama"}
	sk.Brokers = splitList(e.str(InviqaKafkaHost))
	if len(sk.Brokers) == 0 {
		if in.PollingDisabled || in.Job != "" {
			// Nothing connects to Kafka; the sink only has to be valid.
			sk.Brokers = []string{"localhost:9092"}
		} else {
			ps.add(InviqaKafkaHost, "required: the Kafka brokers, comma-separated")
		}
	}
	for _, b := range sk.Brokers {
		if _, _, err := net.SplitHostPort(b); err != nil {
			ps.add(InviqaKafkaHost, "must list host:port brokers, got %q", b)
		}
	}
	if tls {
		sk.TLS = &TLS{Enabled: true, InsecureSkipVerify: skipVerify}
	}
	cfg.Sinks[InviqaSinkName] = sk

	table := InviqaTable
	if t := e.str(InviqaDBOutboxTable); t != "" {
		if err := layout.CheckPlainIdent(t); err != nil {
			ps.add(InviqaDBOutboxTable, "%v", err)
		}
		table = t
	}
	src := Source{
		Preset:      ManagedTablePreset,
		Sink:        InviqaSinkName,
		BatchSize:   e.integer(InviqaBatchSize, InviqaDefaultBatchSize, 1, MaxBatchSize),
		Pipeline:    e.integer(InviqaWriteConcurrency, DefaultPipeline, 1, MaxPipeline),
		MaxAttempts: e.integer(InviqaKafkaPublishAttempts, InviqaDefaultPublishAttempts, 1, MaxMaxAttempts),
		ManageTable: manage,
	}
	pollMax := time.Duration(e.integer(InviqaPollFrequencyMs, InviqaDefaultPollFrequency, 1, 3_600_000)) * time.Millisecond
	src.Poll = Poll{Min: Duration(min(DefaultPollMin, pollMax)), Max: Duration(pollMax)}

	for _, db := range inviqaDatabases(e, tls, skipVerify) {
		cfg.Databases[db.name] = db.Database
		s := src
		s.Name = db.name + "." + table
		s.Database = db.name
		s.Table = db.schema + "." + table
		cfg.Sources = append(cfg.Sources, s)
	}

	for _, k := range sortedKeys(e.vars) {
		if strings.HasPrefix(k, InviqaNewRelicPrefix) && e.vars[k] != "" {
			in.Notes = append(in.Notes, InviqaNote{k,
				"outbox-relay has no New Relic agent; scrape its Prometheus metrics on admin.listen (/metrics) instead"})
		}
	}
	if len(ps) > 0 {
		return in, ps
	}
	applyEnv(cfg, func(name string) (string, bool) {
		v, ok := e.vars[name]
		return v, ok
	}, &ps)
	cfg.ApplyDefaults()
	return in, ps
}

// inviqaManageTable reads SKIP_MIGRATIONS and its v0 opposite
// ENABLE_MIGRATIONS; nil leaves the preset's default (managed).
func inviqaManageTable(e inviqaEnv) *bool {
	skip, skipSet := e.boolean(InviqaSkipMigrations)
	enable, enableSet := e.boolean(InviqaEnableMigrations)
	switch {
	case skipSet && enableSet && skip == enable:
		e.ps.add(InviqaEnableMigrations, "contradicts %s; set only %s", InviqaSkipMigrations, InviqaSkipMigrations)
		return nil
	case skipSet:
		return ptr(!skip)
	case enableSet:
		return ptr(enable)
	}
	return nil
}

// inviqaDB is one database of DB_NAME.
type inviqaDB struct {
	Database
	name   string // key in Databases
	schema string // where kafka_outbox is: public, or the MySQL database
}

// inviqaDatabases builds one database per name in DB_NAME (or DB_SCHEMA).
func inviqaDatabases(e inviqaEnv, tls, skipVerify bool) []inviqaDB {
	driver := e.str(InviqaDBDriver)
	if driver != "postgres" && driver != "mysql" {
		e.ps.add(InviqaDBDriver, "must be postgres or mysql, got %q", driver)
	}
	host := e.str(InviqaDBHost)
	if host == "" {
		e.ps.add(InviqaDBHost, "required: the database host")
	}
	port := e.integer(InviqaDBPort, 0, 1, 65535)
	if e.str(InviqaDBPort) == "" {
		e.ps.add(InviqaDBPort, "required: the database port")
	}
	user, _ := e.lookup(InviqaDBUser) // user and password are taken verbatim
	pass, _ := e.lookup(InviqaDBPass)
	if user == "" {
		e.ps.add(InviqaDBUser, "required: the database user")
	}
	if driver == "mysql" && strings.ContainsAny(user, ":@/") {
		e.ps.add(InviqaDBUser, "a MySQL user name may not hold ':', '@' or '/'")
	}
	namesVar := InviqaDBName
	names := splitList(e.str(InviqaDBName))
	if old := splitList(e.str(InviqaDBSchema)); len(old) > 0 {
		if len(names) > 0 {
			e.ps.add(InviqaDBSchema, "the v0 name of %s; set only %s", InviqaDBName, InviqaDBName)
		}
		names, namesVar = old, InviqaDBSchema
	}
	if len(names) == 0 {
		e.ps.add(InviqaDBName, "required: the database name (or a comma-separated list)")
	}
	var out []inviqaDB
	seen := map[string]bool{}
	for _, n := range names {
		if !namePattern.MatchString(n) {
			e.ps.add(namesVar, "invalid database name %q: must match %s", n, namePattern)
			continue
		}
		if err := layout.CheckPlainIdent(n); driver == "mysql" && err != nil {
			e.ps.add(namesVar, "a MySQL database holding the table %v", err)
			continue
		}
		if seen[n] {
			e.ps.add(namesVar, "database %q is listed twice", n)
			continue
		}
		seen[n] = true
		db := inviqaDB{name: n, Database: Database{Driver: driver}}
		addr := net.JoinHostPort(host, strconv.Itoa(port))
		if driver == "mysql" {
			db.schema = n
			db.DSN = fmt.Sprintf("%s:%s@tcp(%s)/%s?parseTime=true&tls=%s", user, pass, addr, n, inviqaMySQLTLS(tls, skipVerify))
		} else {
			db.schema = "public"
			u := url.URL{Scheme: "postgres", User: url.UserPassword(user, pass), Host: addr, Path: "/" + n,
				RawQuery: "sslmode=" + inviqaSSLMode(tls, skipVerify)}
			db.DSN = u.String()
		}
		out = append(out, db)
	}
	sort.Slice(out, func(i, j int) bool { return out[i].name < out[j].name })
	return out
}

// inviqaSSLMode is the PostgreSQL sslmode the original relay used.
func inviqaSSLMode(tls, skipVerify bool) string {
	switch {
	case !tls:
		return "disable"
	case skipVerify:
		return "require"
	}
	return "verify-full"
}

// inviqaMySQLTLS is the go-sql-driver/mysql tls parameter the original relay
// used.
func inviqaMySQLTLS(tls, skipVerify bool) string {
	switch {
	case !tls:
		return "false"
	case skipVerify:
		return "skip-verify"
	}
	return "true"
}

// inviqaLogLevel maps a logrus level name to ours.
func inviqaLogLevel(s string) (string, bool) {
	switch strings.ToLower(s) {
	case "trace", "debug":
		return "debug", true
	case "info":
		return "info", true
	case "warn", "warning":
		return "warn", true
	case "error", "fatal", "panic":
		return "error", true
	}
	return "", false
}
