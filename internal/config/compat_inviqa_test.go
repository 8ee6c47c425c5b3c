package config

import (
	"errors"
	"net/url"
	"slices"
	"strings"
	"testing"
	"time"
)

// inviqaBase is a minimal inviqa/kafka-outbox-relay deployment on PostgreSQL.
var inviqaBase = []string{
	"DB_DRIVER=postgres", "DB_HOST=db.internal", "DB_PORT=5432", "DB_USER=app", "DB_PASS=p@ss:w/rd?#",
	"DB_NAME=shop", "KAFKA_HOST=k1:9092,k2:9093",
}

// withEnv returns inviqaBase with kvs set (a value replaces the base's) and
// the variables named in unset removed.
func withEnv(kvs []string, unset ...string) []string {
	out := []string{}
	for _, kv := range inviqaBase {
		k, _, _ := strings.Cut(kv, "=")
		if slices.Contains(unset, k) || slices.ContainsFunc(kvs, func(s string) bool { return strings.HasPrefix(s, k+"=") }) {
			continue
		}
		out = append(out, kv)
	}
	return append(out, kvs...)
}

func only(t *testing.T, in *Inviqa) (Source, Database, Sink) {
	t.Helper()
	if len(in.Config.Sources) != 1 || len(in.Config.Databases) != 1 {
		t.Fatalf("want one source and one database, got %d and %d", len(in.Config.Sources), len(in.Config.Databases))
	}
	s := in.Config.Sources[0]
	return s, in.Config.Databases[s.Database], in.Config.Sinks[s.Sink]
}

func dsnQuery(t *testing.T, dsn string) url.Values {
	t.Helper()
	u, err := url.Parse(dsn)
	if err != nil {
		t.Fatal(err)
	}
	return u.Query()
}

func TestFromInviqaMapsEveryVariable(t *testing.T) {
	t.Parallel()
	covered := map[string]bool{}
	cases := []struct {
		name  string
		vars  []string // the inviqa variables this case covers
		env   []string
		flags map[string]string
		check func(t *testing.T, in *Inviqa)
	}{
		{"defaults", []string{"DB_DRIVER", "DB_HOST", "DB_PORT", "DB_USER", "DB_PASS", "DB_NAME", "KAFKA_HOST"}, inviqaBase, nil,
			func(t *testing.T, in *Inviqa) {
				s, db, sk := only(t, in)
				u, err := url.Parse(db.DSN)
				if err != nil {
					t.Fatal(err)
				}
				pass, _ := u.User.Password()
				if db.Driver != "postgres" || u.Host != "db.internal:5432" || u.User.Username() != "app" || pass != "p@ss:w/rd?#" ||
					u.Path != "/shop" || u.Query().Get("sslmode") != "disable" {
					t.Errorf("database %+v", db)
				}
				if s.Name != "shop.kafka_outbox" || s.Table != "public.kafka_outbox" || s.Preset != "kafka-outbox" || s.Database != "shop" {
					t.Errorf("source %s table %s preset %s database %s", s.Name, s.Table, s.Preset, s.Database)
				}
				if s.ManageTable == nil || !*s.ManageTable {
					t.Error("the table is not managed by default")
				}
				if s.MaxAttempts != 3 || s.BatchSize != 250 || s.Poll.Max.D() != 500*time.Millisecond || s.Pipeline != DefaultPipeline {
					t.Errorf("max_attempts %d batch_size %d poll.max %s pipeline %d: want the original defaults 3, 250, 500ms",
						s.MaxAttempts, s.BatchSize, s.Poll.Max, s.Pipeline)
				}
				if !slices.Equal(sk.Brokers, []string{"k1:9092", "k2:9093"}) || sk.Type != "kafka" || sk.TLS != nil || sk.Compression != "gzip" {
					t.Errorf("sink %+v", sk)
				}
				if in.Config.Admin.Listen != ":80" || in.Config.Log.Level != "info" || in.Job != "" || in.PollingDisabled || len(in.Notes) != 0 {
					t.Errorf("admin %q log %q job %q polling disabled %v notes %v", in.Config.Admin.Listen, in.Config.Log.Level,
						in.Job, in.PollingDisabled, in.Notes)
				}
			}},
		{"several databases", []string{"DB_NAME"}, withEnv([]string{"DB_NAME=shop,billing"}), nil,
			func(t *testing.T, in *Inviqa) {
				var names []string
				for _, s := range in.Config.Sources {
					names = append(names, s.Name+"@"+s.Database)
					if !strings.HasSuffix(in.Config.Databases[s.Database].DSN, "/"+s.Database+"?sslmode=disable") {
						t.Errorf("database %s: dsn %s", s.Database, in.Config.Databases[s.Database].DSN)
					}
				}
				if !slices.Equal(names, []string{"billing.kafka_outbox@billing", "shop.kafka_outbox@shop"}) {
					t.Errorf("sources %v", names)
				}
			}},
		{"v0 database and table names", []string{"DB_SCHEMA", "DB_OUTBOX_TABLE"},
			withEnv([]string{"DB_SCHEMA=legacy", "DB_OUTBOX_TABLE=events_outbox"}, "DB_NAME"), nil,
			func(t *testing.T, in *Inviqa) {
				s, db, _ := only(t, in)
				if s.Table != "public.events_outbox" || !strings.Contains(db.DSN, "/legacy?") {
					t.Errorf("table %s dsn %s", s.Table, db.DSN)
				}
			}},
		{"tls", []string{"TLS_ENABLE"}, withEnv([]string{"TLS_ENABLE=true"}), nil,
			func(t *testing.T, in *Inviqa) {
				_, db, sk := only(t, in)
				if sk.TLS == nil || !sk.TLS.Enabled || sk.TLS.InsecureSkipVerify || dsnQuery(t, db.DSN).Get("sslmode") != "verify-full" {
					t.Errorf("tls %+v dsn %s", sk.TLS, db.DSN)
				}
			}},
		{"tls without verification", []string{"TLS_SKIP_VERIFY_PEER"}, withEnv([]string{"TLS_ENABLE=1", "TLS_SKIP_VERIFY_PEER=TRUE"}), nil,
			func(t *testing.T, in *Inviqa) {
				_, db, sk := only(t, in)
				if sk.TLS == nil || !sk.TLS.InsecureSkipVerify || dsnQuery(t, db.DSN).Get("sslmode") != "require" {
					t.Errorf("tls %+v dsn %s", sk.TLS, db.DSN)
				}
			}},
		{"numbers", []string{"KAFKA_PUBLISH_ATTEMPTS", "WRITE_CONCURRENCY", "POLL_FREQUENCY_MS", "BATCH_SIZE"},
			withEnv([]string{"KAFKA_PUBLISH_ATTEMPTS=7", "WRITE_CONCURRENCY=4", "POLL_FREQUENCY_MS=20", "BATCH_SIZE=1000"}), nil,
			func(t *testing.T, in *Inviqa) {
				s, _, _ := only(t, in)
				if s.MaxAttempts != 7 || s.Pipeline != 4 || s.BatchSize != 1000 || s.Poll.Max.D() != 20*time.Millisecond ||
					s.Poll.Min.D() != 20*time.Millisecond {
					t.Errorf("max_attempts %d pipeline %d batch_size %d poll %s..%s", s.MaxAttempts, s.Pipeline, s.BatchSize, s.Poll.Min, s.Poll.Max)
				}
			}},
		{"skip migrations", []string{"SKIP_MIGRATIONS"}, withEnv([]string{"SKIP_MIGRATIONS=true"}), nil,
			func(t *testing.T, in *Inviqa) {
				if s, _, _ := only(t, in); s.ManageTable == nil || *s.ManageTable {
					t.Errorf("manage_table %v, want false", s.ManageTable)
				}
			}},
		{"v0 migrations off", []string{"ENABLE_MIGRATIONS"}, withEnv([]string{"ENABLE_MIGRATIONS=false"}), nil,
			func(t *testing.T, in *Inviqa) {
				if s, _, _ := only(t, in); s.ManageTable == nil || *s.ManageTable {
					t.Errorf("manage_table %v, want false", s.ManageTable)
				}
			}},
		{"polling disabled needs no brokers", []string{"POLLING_DISABLED"}, withEnv([]string{"POLLING_DISABLED=true"}, "KAFKA_HOST"), nil,
			func(t *testing.T, in *Inviqa) {
				if !in.PollingDisabled {
					t.Error("polling not disabled")
				}
			}},
		{"cleanup job with sidecar", []string{"RUN_CLEANUP", "SIDECAR_PROXY_URL"},
			withEnv([]string{"RUN_CLEANUP=true", "SIDECAR_PROXY_URL=http://127.0.0.1:15020"}, "KAFKA_HOST"), nil,
			func(t *testing.T, in *Inviqa) {
				if in.Job != InviqaJobCleanup || in.SidecarProxyURL != "http://127.0.0.1:15020" || len(in.Notes) != 0 {
					t.Errorf("job %q sidecar %q notes %v", in.Job, in.SidecarProxyURL, in.Notes)
				}
			}},
		{"optimize job", []string{"RUN_OPTIMIZE"}, withEnv([]string{"RUN_OPTIMIZE=true"}), nil,
			func(t *testing.T, in *Inviqa) {
				if in.Job != InviqaJobOptimize {
					t.Errorf("job %q", in.Job)
				}
			}},
		{"sidecar without a job is noted", nil, withEnv([]string{"SIDECAR_PROXY_URL=http://localhost:15000"}), nil,
			func(t *testing.T, in *Inviqa) {
				if len(in.Notes) != 1 || in.Notes[0].Var != "SIDECAR_PROXY_URL" || in.Notes[0].Reason == "" {
					t.Errorf("notes %v", in.Notes)
				}
			}},
		{"log level", []string{"LOG_LEVEL"}, withEnv([]string{"LOG_LEVEL=trace"}), nil,
			func(t *testing.T, in *Inviqa) {
				if in.Config.Log.Level != "debug" {
					t.Errorf("log.level %q", in.Config.Log.Level)
				}
			}},
		{"new relic accepted and noted", []string{"NEW_RELIC_*"},
			withEnv([]string{"NEW_RELIC_LICENSE_KEY=secret", "NEW_RELIC_APP_NAME=relay", "NEW_RELIC_ENABLED="}), nil,
			func(t *testing.T, in *Inviqa) {
				var vars []string
				for _, n := range in.Notes {
					vars = append(vars, n.Var)
					if strings.Contains(n.Reason, "secret") {
						t.Errorf("a note shows a value: %s", n.Reason)
					}
				}
				if !slices.Equal(vars, []string{"NEW_RELIC_APP_NAME", "NEW_RELIC_LICENSE_KEY"}) {
					t.Errorf("notes for %v", vars)
				}
			}},
		{"flags override the environment", nil, inviqaBase,
			map[string]string{"DB_HOST": "flag-host", "BATCH_SIZE": "9", "RUN_CLEANUP": "true", "KAFKA_HOST": "f1:1"},
			func(t *testing.T, in *Inviqa) {
				s, db, sk := only(t, in)
				if !strings.Contains(db.DSN, "@flag-host:5432/") || s.BatchSize != 9 || in.Job != InviqaJobCleanup ||
					!slices.Equal(sk.Brokers, []string{"f1:1"}) {
					t.Errorf("dsn %s batch_size %d job %q brokers %v", db.DSN, s.BatchSize, in.Job, sk.Brokers)
				}
			}},
		{"our overrides apply on top", nil,
			withEnv([]string{"LOG_LEVEL=error", "OUTBOX_RELAY_LOG_LEVEL=debug", "OUTBOX_RELAY_ADMIN_LISTEN=127.0.0.1:9999",
				"OUTBOX_RELAY_SINK_KAFKA_BROKERS=o1:1", "OUTBOX_RELAY_DATABASE_SHOP_DSN=postgres://other/shop"}), nil,
			func(t *testing.T, in *Inviqa) {
				_, db, sk := only(t, in)
				if in.Config.Log.Level != "debug" || in.Config.Admin.Listen != "127.0.0.1:9999" || db.DSN != "postgres://other/shop" ||
					!slices.Equal(sk.Brokers, []string{"o1:1"}) {
					t.Errorf("log %q admin %q dsn %s brokers %v", in.Config.Log.Level, in.Config.Admin.Listen, db.DSN, sk.Brokers)
				}
			}},
	}
	for _, c := range cases {
		for _, v := range c.vars {
			covered[v] = true
		}
		t.Run(c.name, func(t *testing.T) {
			in, err := FromInviqa(c.env, c.flags)
			if err != nil {
				t.Fatal(err)
			}
			c.check(t, in)
		})
	}
	for _, v := range InviqaVars {
		if !covered[v.Env] {
			t.Errorf("no case covers %s", v.Env)
		}
	}
}

// The MySQL mapping is checked before validation, which accepts the driver
// only once the MySQL store is part of the relay.
func TestFromInviqaMySQL(t *testing.T) {
	t.Parallel()
	for _, c := range []struct {
		env  []string
		want string
	}{
		{withEnv([]string{"DB_DRIVER=mysql", "DB_PORT=3306", "DB_PASS=p@ss:w/rd"}),
			"app:p@ss:w/rd@tcp(db.internal:3306)/shop?parseTime=true&tls=false"},
		{withEnv([]string{"DB_DRIVER=mysql", "DB_PORT=3306", "TLS_ENABLE=true"}),
			"app:p@ss:w/rd?#@tcp(db.internal:3306)/shop?parseTime=true&tls=true"},
		{withEnv([]string{"DB_DRIVER=mysql", "DB_PORT=3306", "TLS_ENABLE=true", "TLS_SKIP_VERIFY_PEER=true", "DB_HOST=::1"}),
			"app:p@ss:w/rd?#@tcp([::1]:3306)/shop?parseTime=true&tls=skip-verify"},
	} {
		in, ps := buildInviqa(c.env, nil)
		if len(ps) > 0 {
			t.Fatal(ps.err())
		}
		s, db, _ := only(t, in)
		if db.Driver != "mysql" || db.DSN != c.want || s.Table != "shop.kafka_outbox" {
			t.Errorf("driver %s dsn %s table %s; want dsn %s", db.Driver, db.DSN, s.Table, c.want)
		}
		// Valid, or invalid only for the driver while MySQL is not supported.
		if _, err := FromInviqa(c.env, nil); err != nil {
			var ve *ValidationError
			if !errors.As(err, &ve) || len(ve.Problems) != 1 || ve.Problems[0].Path != "databases.shop.driver" {
				t.Errorf("MySQL configuration invalid beyond its driver: %v", err)
			}
		}
	}
}

func TestFromInviqaNamesTheVariable(t *testing.T) {
	t.Parallel()
	for _, c := range []struct {
		env     []string
		wantVar string
		want    string
	}{
		{withEnv(nil, "DB_DRIVER"), "DB_DRIVER", "must be postgres or mysql"},
		{withEnv([]string{"DB_DRIVER=sqlite"}), "DB_DRIVER", `got "sqlite"`},
		{withEnv(nil, "DB_HOST"), "DB_HOST", "required"},
		{withEnv(nil, "DB_PORT"), "DB_PORT", "required"},
		{withEnv([]string{"DB_PORT=70000"}), "DB_PORT", "between 1 and 65535"},
		{withEnv([]string{"DB_PORT=fivefour"}), "DB_PORT", `got "fivefour"`},
		{withEnv(nil, "DB_USER"), "DB_USER", "required"},
		{withEnv(nil, "DB_NAME"), "DB_NAME", "required"},
		{withEnv([]string{"DB_NAME=shop,shop"}), "DB_NAME", "listed twice"},
		{withEnv([]string{"DB_NAME=sh$op"}), "DB_NAME", "invalid database name"},
		{withEnv([]string{"DB_SCHEMA=old"}), "DB_SCHEMA", "set only DB_NAME"},
		{withEnv([]string{"DB_OUTBOX_TABLE=Bad-Name"}), "DB_OUTBOX_TABLE", "plain lower-case identifier"},
		{withEnv(nil, "KAFKA_HOST"), "KAFKA_HOST", "required"},
		{withEnv([]string{"KAFKA_HOST=kafka"}), "KAFKA_HOST", "host:port"},
		{withEnv([]string{"KAFKA_PUBLISH_ATTEMPTS=0"}), "KAFKA_PUBLISH_ATTEMPTS", "between 1 and"},
		{withEnv([]string{"TLS_ENABLE=yes please"}), "TLS_ENABLE", "true or false"},
		{withEnv([]string{"TLS_SKIP_VERIFY_PEER=maybe"}), "TLS_SKIP_VERIFY_PEER", "true or false"},
		{withEnv([]string{"WRITE_CONCURRENCY=0"}), "WRITE_CONCURRENCY", "between 1 and 64"},
		{withEnv([]string{"POLL_FREQUENCY_MS=-5"}), "POLL_FREQUENCY_MS", "between 1 and"},
		{withEnv([]string{"BATCH_SIZE=20000"}), "BATCH_SIZE", "between 1 and 10000"},
		{withEnv([]string{"SKIP_MIGRATIONS=nope"}), "SKIP_MIGRATIONS", "true or false"},
		{withEnv([]string{"SKIP_MIGRATIONS=true", "ENABLE_MIGRATIONS=true"}), "ENABLE_MIGRATIONS", "contradicts"},
		{withEnv([]string{"POLLING_DISABLED=sure"}), "POLLING_DISABLED", "true or false"},
		{withEnv([]string{"RUN_CLEANUP=true", "RUN_OPTIMIZE=true"}), "RUN_OPTIMIZE", "only one"},
		{withEnv([]string{"RUN_CLEANUP=2"}), "RUN_CLEANUP", "true or false"},
		{withEnv([]string{"SIDECAR_PROXY_URL=localhost:15000"}), "SIDECAR_PROXY_URL", "http(s) URL"},
		{withEnv([]string{"LOG_LEVEL=loud"}), "LOG_LEVEL", "must be one of"},
		{withEnv([]string{"DB_DRIVER=mysql", "DB_USER=a:b"}), "DB_USER", "may not hold"},
		{withEnv([]string{"DB_DRIVER=mysql", "DB_NAME=Shop"}), "DB_NAME", "a MySQL database"},
		{withEnv([]string{"OUTBOX_RELAY_LOG_LEVEL=loud"}), "log.level", "must be one of"},
	} {
		_, err := FromInviqa(c.env, nil)
		var ve *ValidationError
		if !errors.As(err, &ve) {
			t.Errorf("%v: error %v, want a *ValidationError", c.env, err)
			continue
		}
		found := false
		for _, p := range ve.Problems {
			found = found || (p.Path == c.wantVar && strings.Contains(p.Message, c.want))
		}
		if !found {
			t.Errorf("%s: %v; want a problem on %s containing %q", c.wantVar, err, c.wantVar, c.want)
		}
	}
}

func TestInviqaPresent(t *testing.T) {
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
	for _, c := range []struct {
		env  func(string) (string, bool)
		want bool
	}{
		{env("DB_DRIVER=postgres", "DB_HOST=db"), true},
		{env("DB_HOST=db"), false},
		{env("DB_DRIVER=postgres", "DB_HOST="), false},
		{env(), false},
		{nil, false},
	} {
		if got := InviqaPresent(c.env); got != c.want {
			t.Errorf("InviqaPresent = %v, want %v", got, c.want)
		}
	}
	flags := map[string]string{}
	for _, v := range InviqaVars {
		if v.Flag != "" {
			flags[v.Flag] = v.Env
		}
	}
	if flags["db-host"] != "DB_HOST" || flags["cleanup"] != "RUN_CLEANUP" || len(flags) != len(InviqaVars)-2 {
		t.Errorf("flags %v", flags)
	}
}
