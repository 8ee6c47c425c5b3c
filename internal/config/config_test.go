package config

import (
	"errors"
	"os"
	"path/filepath"
	"reflect"
	"strings"
	"testing"
	"time"

	"github.com/outbox-relay/outbox-relay/internal/layout"
	"github.com/outbox-relay/outbox-relay/internal/sink/webhook"
)

// mapEnv returns an env lookup backed by m.
func mapEnv(m map[string]string) func(string) (string, bool) {
	return func(k string) (string, bool) {
		v, ok := m[k]
		return v, ok
	}
}

// goodFixtures lists every testdata/*.good.yaml with the environment it is
// parsed under and checks on the result.
var goodFixtures = map[string]struct {
	env   map[string]string
	check func(t *testing.T, c *Config)
}{
	"minimal.good.yaml": {check: checkMinimal},
	"routes.good.yaml": {check: func(t *testing.T, c *Config) {
		rs := c.Sources[0].Routes
		if len(rs) != 2 || rs[0].Name != "payments" || rs[1].Name != "route1" || rs[1].Topic != "eu.{event_type}" ||
			rs[1].Column != "region" || len(rs[0].EventTypes) != 2 {
			t.Fatalf("routes = %+v", rs)
		}
	}},
	"seed.good.yaml": {
		env: map[string]string{
			"PG_PASSWORD":    "pg-pass",
			"TENANTS_DSN":    "postgres://tenants/db",
			"ENVIRONMENT":    "prod",
			"KAFKA_PASSWORD": "kafka-pass",
		},
		check: checkSeed,
	},
	"env.good.yaml": {
		env: map[string]string{
			"OUTBOX_RELAY_DATABASE_MAIN_DSN":              "postgres://from-env/main",
			"OUTBOX_RELAY_DATABASE_REPORTING_EU_DSN_FILE": "testdata/secrets/reporting_dsn",
			"OUTBOX_RELAY_SINK_KAFKA_BROKERS_FILE":        "testdata/secrets/brokers",
			"OUTBOX_RELAY_SINK_KAFKA_SASL_PASSWORD_FILE":  "testdata/secrets/kafka_password",
			"OUTBOX_RELAY_LOG_LEVEL":                      "ERROR",
			"OUTBOX_RELAY_ADMIN_LISTEN":                   "off",
			"DATABASE_URL":                                "postgres://ignored/with-two-databases",
		},
		check: checkEnv,
	},
	"kafka_outbox.good.yaml": {
		check: func(t *testing.T, c *Config) {
			managed, unmanaged := c.Sources[0], c.Sources[1]
			if managed.ManageTable == nil || !*managed.ManageTable || managed.ClaimTimeout != Duration(10*time.Minute) {
				t.Errorf("preset kafka-outbox: manage_table %v, claim_timeout %s; want true and 10m", managed.ManageTable, managed.ClaimTimeout)
			}
			if unmanaged.ManageTable == nil || *unmanaged.ManageTable || unmanaged.ClaimTimeout != Duration(2*time.Minute) {
				t.Errorf("manage_table: false kept as %v, claim_timeout %s", unmanaged.ManageTable, unmanaged.ClaimTimeout)
			}
		},
	},
	"tenants.good.yaml": {check: checkTenants},
	"shards.good.yaml": {
		check: func(t *testing.T, c *Config) {
			if c.Sources[0].Shards != 4 || c.Sources[1].Shards != 1 {
				t.Errorf("shards = %d and %d, want 4 and the default 1", c.Sources[0].Shards, c.Sources[1].Shards)
			}
		},
	},
	"capture.good.yaml": {
		check: func(t *testing.T, c *Config) {
			if h, o := c.Sources[0], c.Sources[1]; h.Capture != CaptureCursor || !h.Cursor() || o.Capture != CapturePoll || o.Cursor() {
				t.Errorf("capture %q and %q, want cursor and the default poll", h.Capture, o.Capture)
			}
		},
	},
	"capture_wal.good.yaml": {
		check: func(t *testing.T, c *Config) {
			if s := c.Sources[0]; s.Capture != CaptureWAL || !s.WAL() || s.Cursor() {
				t.Errorf("capture %q, want wal", s.Capture)
			}
		},
	},
	"event_priority.good.yaml": {
		check: func(t *testing.T, c *Config) {
			k, s := c.Sources[0].EventPriority, c.Sources[1].EventPriority
			if k.Lookahead != 2000 || k.Column != "" || len(k.Classes) != 2 {
				t.Errorf("kitchen: %+v, want two classes, the layout's column and a lookahead of 10 batches (2000)", *k)
			}
			if s.Lookahead != 900 || s.Column != "topic" {
				t.Errorf("split: %+v, want lookahead 900 on column topic", *s)
			}
		},
	},
	"database_url.good.yaml": {
		env: map[string]string{"DATABASE_URL": "postgres://from-url/app"},
		check: func(t *testing.T, c *Config) {
			if got := c.Databases["app"].DSN; got != "postgres://from-url/app" {
				t.Errorf("dsn = %q, want DATABASE_URL", got)
			}
			if c.Sources[0].Database != "app" || c.Sources[0].Sink != "kafka" {
				t.Errorf("source refs = %q, %q; want the only database and sink", c.Sources[0].Database, c.Sources[0].Sink)
			}
		},
	},
}

// badFixtures maps every testdata/*.bad.yaml to substrings its error must
// contain.
var badFixtures = map[string][]string{
	"unknown_key.bad.yaml":        {`sources[0]: unknown field "tabel" (line 7)`},
	"bad_duration.bad.yaml":       {`sources[0].poll.max: invalid duration "1 second"`, "(line 10)"},
	"missing_dsn.bad.yaml":        {`databases.main.dsn: required (or set OUTBOX_RELAY_DATABASE_MAIN_DSN)`},
	"unknown_database.bad.yaml":   {`sources[0].database: unknown database "x" (have: main)`},
	"table_and_discover.bad.yaml": {`sources[2]: set exactly one of table and discover`, `sources[3]: set exactly one of table and discover`},
	"bad_regexp.bad.yaml":         {`sources[0].discover.schemas: invalid regular expression`},
	"bad_template.bad.yaml": {
		`sources[0].layout.key: invalid template "tenant:{tenantId": unclosed "{"`,
		`sources[0].layout.partition_key: invalid template "{tenantId}}": unexpected "}"`,
		`sources[0].topic: invalid template "events.{}": empty column reference`,
	},
	"duplicate_names.bad.yaml": {
		`sources[1].name: duplicate name "orders" (also sources[0])`,
		`sources[2].name: must match`,
	},
	"bad_batch_size.bad.yaml": {
		`source "b": sources[1].batch_size: must be between 1 and 10000, got 0`,
		`source "c": sources[2].batch_size: must be between 1 and 10000, got 20000`,
	},
	"bad_shards.bad.yaml": {
		`source "orders": sources[0].shards: must be between 1 and 256, got 0`,
		`source "billing": sources[1].shards: must be between 1 and 256, got 300`,
		`source "payments": sources[2].shards: not with delivery exactly_once (one transactional producer serves the whole source), got 4`,
	},
	"capture.bad.yaml": {
		`source "nocolumn": sources[0].layout.xid_column: required with capture cursor: an xid8 column filled by DEFAULT pg_current_xact_id()`,
		`source "mysql": sources[1].capture: cursor needs PostgreSQL (it reads transaction snapshots); database shop is mysql`,
		`source "split": sources[2].shards: not with capture cursor: one position per source, read by one worker; got 4`,
		`source "split": sources[2].retention: not with capture cursor: the relay never writes to the table`,
		`source "split": sources[2].event_priority: not with capture cursor`,
		`source "split": sources[2].delivery: exactly_once is not available with capture cursor`,
		`source "wal": sources[3].capture: must be one of poll, cursor, wal, got "logical"`,
	},
	"capture_wal.bad.yaml": {
		`source "mysql": sources[0].capture: wal needs PostgreSQL (it reads logical replication); database shop is mysql`,
		`source "split": sources[1].shards: not with capture wal: one replication slot per source, streamed by one worker; got 4`,
		`source "split": sources[1].event_priority: not with capture wal`,
		`source "split": sources[1].delivery: exactly_once is not available with capture wal`,
		`source "queue": sources[2].capture: wal reads inserts; a queue (state mode queue) is claimed by deleting its rows`,
	},
	"event_priority.bad.yaml": {
		`source "split": sources[0].event_priority: not with shards (4) and ordering: a bucket's claim does not rank its rows`,
		`source "empty": sources[1].event_priority.classes: want 1 to 16 patterns, got 0`,
		`source "everything": sources[2].event_priority.classes[1]: "**" matches every event: list the urgent ones`,
		`source "everything": sources[2].event_priority.lookahead: must be between 1 and 1000000, got -1`,
	},
	"bad_circuit.bad.yaml": {
		`sinks.k.circuit.failures: must be at least 1, got 0`,
		`sinks.k.circuit.max_cooldown: must be at least circuit.cooldown (5s), got 1s`,
	},
	"unset_var.bad.yaml": {`databases.main.dsn: environment variable "RELAY_TEST_UNSET_PASSWORD" is not set`},
	"bad_table.bad.yaml": {
		`sources[0].table: invalid table name "outbox": must be schema-qualified`,
		`sources[1].table: invalid table name "tenant.OutboxEvent": "OutboxEvent" has upper-case letters`,
		`sources[2].table: invalid table name "tenant.\"Outbox": unterminated quoted identifier`,
	},
	"no_sources.bad.yaml": {`sources: at least one source is required`},
	"bad_sink.bad.yaml": {
		`sinks.x.type: must be one of kafka, nats, rabbitmq, redis, mqtt, webhook, got "pigeon"`,
		`sinks.k.brokers: required`,
		`sinks.r.brokers: a Kafka setting; settings of a rabbitmq sink go under sinks.r.rabbitmq`,
		`sinks.r.mqtt: set, but the sink's type is "rabbitmq"`,
		`sinks.r.rabbitmq: required for a sink of type rabbitmq`,
		`sinks.m.mqtt.url:`,
		`sinks.k.compression: must be one of`,
		`sinks.k.sasl.mechanism: must be one of PLAIN, SCRAM-SHA-256, SCRAM-SHA-512, got "OAUTHBEARER"`,
		`sinks.k.sasl.username: required`,
		`sinks.k.sasl.password: required (or set OUTBOX_RELAY_SINK_K_SASL_PASSWORD)`,
	},
	"many_problems.bad.yaml": {
		"invalid configuration (13 problems)",
		`relay_schema: must be a plain lower-case identifier`,
		`log.level: must be one of debug, info, warn, error, got "verbose"`,
		`log.format: must be one of json, text, got "xml"`,
		`admin.listen: must be host:port`,
		`databases.main.driver: must be one of postgres, mysql, got "oracle"`,
		`sources[0].database: required when more than one database is configured (have: main, second)`,
		`sources[0].layout.payload_format: must be one of json, raw, got "avro"`,
		`sources[0].layout.state.mode: must be one of flag, timestamp, status, delete, queue, got "archive"`,
		`sources[0].pipeline: must be between 1 and 64, got 65`,
		`sources[0].max_attempts: must be between 1 and 1000, got 0`,
		`sources[0].backoff.initial: must not exceed backoff.max (1m0s), got 10m0s`,
		`sources[0].poll.min: must not exceed poll.max (1s), got 2s`,
		`sources[0].notify: must be one of auto, on, off, got "sometimes"`,
	},
	"wrong_type.bad.yaml": {
		`sinks.kafka.brokers: expected a list, got "localhost:9092" (line 4)`,
		`sources[0].batch_size: expected an integer, got "lots" (line 8)`,
		`sources[0].ordering: expected true or false, got "perhaps" (line 9)`,
	},
	"bad_routes.bad.yaml": {
		`sources[0].routes[0].sink: required (one of: kafka, other)`,
		`sources[0].routes[1].sink: unknown sink "nowhere"`,
		`sources[0].routes[1].values: column and values go together`,
		`sources[0].routes[2]: give at least one condition`,
		`sources[0].routes[3].topic:`,
	},
	"tenants.bad.yaml": {
		"databases.both.dsns: set dsn (one database, or the server discover looks on) or dsns (several databases), not both",
		"databases.listed.dsns[1]: must not be empty",
		"databases.listed.dsns[2]: the same as dsns[0]",
		"databases.listed.discover: not with dsns: discover finds the databases on the server dsn names",
		"databases.serverless.dsn: required with discover: the server whose databases it finds (or set OUTBOX_RELAY_DATABASE_SERVERLESS_DSN)",
		"databases.neither.discover: set pattern (a glob on database names, or regex:...) or query (a SELECT returning their names)",
		"databases.twice.discover: set pattern or query, not both",
		`databases.badglob.discover.pattern: invalid glob "tenant_[": unclosed "["`,
		"databases.badglob.discover.interval: must be positive, got 0s",
		"databases.badregex.discover.pattern: invalid regular expression: error parsing regexp: missing closing ): `tenant_(`",
	},
	"duplicate_key.bad.yaml": {`sources[0].table: duplicate key "table" (line 8, first set at line 7)`},
	"kafka_outbox.bad.yaml": {
		`sources[0].manage_table: only presets kafka-outbox and payment-queue have tables the relay manages, got preset "status"`,
		`sources[1].table: a managed table must be a plain lower-case identifier`,
		`sources[2].claim_timeout: must be at least 1s, got 10ms`,
		`sources[3].layout.state.errored: not used with mode delete`,
		`sources[3].layout.state: set both batch_id and claimed_at, or neither`,
	},
}

func TestFixtures(t *testing.T) {
	files, err := filepath.Glob("testdata/*.yaml")
	if err != nil || len(files) == 0 {
		t.Fatalf("no fixtures: %v", err)
	}
	seen := map[string]bool{}
	for _, file := range files {
		name := filepath.Base(file)
		seen[name] = true
		t.Run(name, func(t *testing.T) {
			data, err := os.ReadFile(file)
			if err != nil {
				t.Fatal(err)
			}
			switch {
			case strings.HasSuffix(name, ".good.yaml"):
				fx, ok := goodFixtures[name]
				if !ok {
					t.Fatalf("fixture %s is not listed in goodFixtures", name)
				}
				cfg, err := Parse(data, mapEnv(fx.env))
				if err != nil {
					t.Fatalf("Parse: %v", err)
				}
				if fx.check != nil {
					fx.check(t, cfg)
				}
			case strings.HasSuffix(name, ".bad.yaml"):
				want, ok := badFixtures[name]
				if !ok {
					t.Fatalf("fixture %s is not listed in badFixtures", name)
				}
				_, err := Parse(data, mapEnv(nil))
				if err == nil {
					t.Fatal("Parse succeeded, want an error")
				}
				for _, w := range want {
					if !strings.Contains(err.Error(), w) {
						t.Errorf("error does not contain %q:\n%v", w, err)
					}
				}
			default:
				t.Fatalf("fixture %s must end in .good.yaml or .bad.yaml", name)
			}
		})
	}
	for name := range goodFixtures {
		if !seen[name] {
			t.Errorf("goodFixtures lists missing file %s", name)
		}
	}
	for name := range badFixtures {
		if !seen[name] {
			t.Errorf("badFixtures lists missing file %s", name)
		}
	}
}

func checkMinimal(t *testing.T, c *Config) {
	t.Helper()
	yes, no := true, false
	want := &Config{
		RelaySchema: "outbox_relay",
		Log:         Log{Level: "info", Format: "json"},
		Admin:       Admin{Listen: "127.0.0.1:9090"},
		Shutdown:    Shutdown{Timeout: Duration(30 * time.Second)},
		LeaseTTL:    Duration(15 * time.Second),
		Databases: map[string]Database{
			"main": {Driver: "postgres", DSN: "postgres://relay@localhost:5432/app", MaxConns: 10},
		},
		Sinks: map[string]Sink{
			"kafka": {
				Type:            "kafka",
				Brokers:         []string{"localhost:9092"},
				ClientID:        "outbox-relay",
				MaxMessageBytes: 1000000,
				DeliveryTimeout: Duration(30 * time.Second),
				RecordRetries:   10,
				Compression:     "none",
				Timeout:         Duration(35 * time.Second),
				BatchWait:       Duration(500 * time.Millisecond),
				Circuit:         Circuit{Failures: 5, Cooldown: Duration(time.Second), MaxCooldown: Duration(30 * time.Second)},
			},
		},
		Sources: []Source{{
			Name:           "orders",
			Database:       "main",
			Table:          "public.outbox",
			Sink:           "kafka",
			BatchSize:      500,
			Pipeline:       2,
			Shards:         1,
			Ordering:       &yes,
			MaxAttempts:    10,
			Backoff:        Backoff{Initial: Duration(time.Second), Max: Duration(5 * time.Minute)},
			Poll:           Poll{Min: Duration(50 * time.Millisecond), Max: Duration(time.Second), Fallback: Duration(10 * time.Second)},
			Delivery:       DeliveryAtLeastOnce,
			Capture:        CapturePoll,
			Notify:         "auto",
			InstallTrigger: &yes,
			ManageTable:    &no,
			ClaimTimeout:   Duration(10 * time.Minute),
			Readiness:      Readiness{MaxOldestPending: Duration(5 * time.Minute), MaxClaimFailure: Duration(30 * time.Second)},
		}},
	}
	if !reflect.DeepEqual(c, want) {
		t.Errorf("got  %+v\nwant %+v", c, want)
	}
}

func checkSeed(t *testing.T, c *Config) {
	t.Helper()
	if got := c.Databases["main"].DSN; got != "postgres://relay:pg-pass@db:5432/app?sslmode=disable" {
		t.Errorf("main dsn = %q", got)
	}
	if got := c.Databases["tenants"]; got.DSN != "postgres://tenants/db" || got.MaxConns != 10 {
		t.Errorf("tenants = %+v", got)
	}
	p := c.Sinks["primary"]
	if p.ClientID != "relay-prod" || p.SASL.Password != "kafka-pass" || p.RecordRetries != 0 ||
		p.DeliveryTimeout.D() != 90*time.Second || p.Linger.D() != 5*time.Millisecond {
		t.Errorf("primary sink = %+v", p)
	}
	if len(c.Sources) != 3 {
		t.Fatalf("got %d sources", len(c.Sources))
	}
	svc := c.Sources[0]
	if svc.Preset != "debezium" || svc.Discover.Interval.D() != 30*time.Second ||
		!reflect.DeepEqual(svc.Discover.Tables, []string{"outbox"}) || svc.Notify != "on" ||
		svc.Backoff.Initial.D() != 250*time.Millisecond || svc.Poll.Max.D() != 2*time.Second {
		t.Errorf("services = %+v", svc)
	}
	tenant := c.Sources[1]
	if schema, table, err := layout.ParseTableName(tenant.Table); err != nil || schema != "tenant" || table != "OutboxEvent" {
		t.Errorf("tenant table = %q, %q, %v", schema, table, err)
	}
	if *tenant.Ordering || *tenant.InstallTrigger || tenant.Layout.Key != "tenant:{tenantId}" ||
		tenant.Layout.State.Published != "SENT" || tenant.MaxAttempts != 25 {
		t.Errorf("tenant-events = %+v", tenant)
	}
	audit := c.Sources[2]
	if !reflect.DeepEqual(audit.Discover.Tables, []string{"outbox", "outbox_events"}) ||
		audit.Discover.Interval.D() != time.Minute || audit.Sink != "audit" ||
		!reflect.DeepEqual(audit.Layout.State.PublishedAt, []string{"published_at", "processed_at"}) {
		t.Errorf("audit.v1 = %+v", audit)
	}
}

func checkEnv(t *testing.T, c *Config) {
	t.Helper()
	if got := c.Databases["main"].DSN; got != "postgres://from-env/main" {
		t.Errorf("main dsn = %q", got)
	}
	if got := c.Databases["reporting-eu"].DSN; got != "postgres://relay:s3cret@reporting:5432/reporting" {
		t.Errorf("reporting-eu dsn = %q (from _FILE, newline trimmed)", got)
	}
	k := c.Sinks["kafka"]
	if !reflect.DeepEqual(k.Brokers, []string{"broker-a:9092", "broker-b:9092"}) {
		t.Errorf("brokers = %q", k.Brokers)
	}
	if k.SASL.Password != "kafka-pass" {
		t.Errorf("sasl password = %q (from _FILE, CRLF trimmed)", k.SASL.Password)
	}
	if c.Log.Level != "error" || c.Admin.Listen != "off" {
		t.Errorf("log.level = %q, admin.listen = %q", c.Log.Level, c.Admin.Listen)
	}
}

func TestLoad(t *testing.T) {
	cfg, err := Load("testdata/minimal.good.yaml")
	if err != nil {
		t.Fatal(err)
	}
	checkMinimal(t, cfg)

	_, err = Load("testdata/unknown_database.bad.yaml")
	var ve *ValidationError
	if !errors.As(err, &ve) || len(ve.Problems) != 1 || ve.Problems[0].Path != "sources[0].database" {
		t.Errorf("Load error = %v, want a *ValidationError for sources[0].database", err)
	}
	if err == nil || !strings.Contains(err.Error(), "testdata/unknown_database.bad.yaml") {
		t.Errorf("Load error %v does not name the file", err)
	}

	if _, err := Load("testdata/does-not-exist.yaml"); err == nil || !errors.Is(err, os.ErrNotExist) {
		t.Errorf("Load of a missing file = %v, want os.ErrNotExist", err)
	}
}

// TestSinkTimeoutOutlastsOwn: a sink's call bound defaults above the sink's
// own wait for one message, so a slow but working destination does not
// open its circuit.
func TestSinkTimeoutOutlastsOwn(t *testing.T) {
	cfg := &Config{
		Databases: map[string]Database{"main": {DSN: "postgres://localhost/app"}},
		Sinks: map[string]Sink{
			"k":    {Type: "kafka", Brokers: []string{"localhost:9092"}},
			"hook": {Type: "webhook", Blocks: Blocks{"webhook": &webhook.Config{URL: "https://h.example.com/x", Timeout: 50 * time.Second}}},
		},
		Sources: []Source{{Name: "orders", Table: "public.outbox", Sink: "k"}},
	}
	cfg.ApplyDefaults()
	if err := cfg.Validate(); err != nil {
		t.Fatal(err)
	}
	if got := cfg.Sinks["k"].Timeout.D(); got != DefaultDeliveryTimeout+5*time.Second {
		t.Errorf("kafka sink timeout %s, want its delivery timeout %s + 5s", got, DefaultDeliveryTimeout)
	}
	if got := cfg.Sinks["hook"].Timeout.D(); got != 55*time.Second {
		t.Errorf("webhook sink timeout %s, want its own 50s + 5s", got)
	}
}
