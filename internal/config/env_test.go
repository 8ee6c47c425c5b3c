package config

import (
	"os"
	"path/filepath"
	"reflect"
	"strings"
	"testing"
)

const envBase = `
databases:
  billing-eu: {}
sinks:
  main-kafka:
    type: kafka
    brokers: [file:9092]
    sasl: {mechanism: PLAIN, username: relay, password: from-file}
sources:
  - name: billing
    table: billing.outbox
`

// writeSecret writes content to a file in a temporary directory and returns
// its path.
func writeSecret(t *testing.T, content string) string {
	t.Helper()
	path := filepath.Join(t.TempDir(), "secret")
	if err := os.WriteFile(path, []byte(content), 0o600); err != nil {
		t.Fatal(err)
	}
	return path
}

func TestEnvOverrides(t *testing.T) {
	cfg, err := Parse([]byte(envBase), mapEnv(map[string]string{
		"OUTBOX_RELAY_DATABASE_BILLING_EU_DSN":        "postgres://env/billing",
		"OUTBOX_RELAY_SINK_MAIN_KAFKA_BROKERS":        " a:9092, b:9092 ,,c:9092",
		"OUTBOX_RELAY_SINK_MAIN_KAFKA_SASL_PASSWORD":  "from-env",
		"OUTBOX_RELAY_LOG_LEVEL":                      "debug",
		"OUTBOX_RELAY_ADMIN_LISTEN":                   "127.0.0.1:9999",
		"OUTBOX_RELAY_DATABASE_UNDECLARED_DSN":        "postgres://ignored",
		"OUTBOX_RELAY_SINK_MAIN_KAFKA_BROKERS_FILE":   "",
		"OUTBOX_RELAY_DATABASE_BILLING_EU_DSN_FILE":   "",
		"OUTBOX_RELAY_SINK_MAIN_KAFKA_SASL_PASSWORD_": "not a recognised name",
	}))
	if err != nil {
		t.Fatal(err)
	}
	if got := cfg.Databases["billing-eu"].DSN; got != "postgres://env/billing" {
		t.Errorf("dsn = %q", got)
	}
	sk := cfg.Sinks["main-kafka"]
	if want := []string{"a:9092", "b:9092", "c:9092"}; !reflect.DeepEqual(sk.Brokers, want) {
		t.Errorf("brokers = %q, want %q", sk.Brokers, want)
	}
	if sk.SASL.Password != "from-env" || sk.SASL.Username != "relay" {
		t.Errorf("sasl = %+v", sk.SASL)
	}
	if cfg.Log.Level != "debug" || cfg.Admin.Listen != "127.0.0.1:9999" {
		t.Errorf("log.level = %q, admin.listen = %q", cfg.Log.Level, cfg.Admin.Listen)
	}
	if len(cfg.Databases) != 1 {
		t.Errorf("an override created a database: %v", cfg.Databases)
	}
}

func TestEnvOverrideValuesAreNotExpanded(t *testing.T) {
	cfg, err := Parse([]byte(envBase), mapEnv(map[string]string{
		"OUTBOX_RELAY_DATABASE_BILLING_EU_DSN": "postgres://u:${NOT_A_REF}@h/db",
	}))
	if err != nil {
		t.Fatal(err)
	}
	if got := cfg.Databases["billing-eu"].DSN; got != "postgres://u:${NOT_A_REF}@h/db" {
		t.Errorf("dsn = %q", got)
	}
}

func TestEnvFileVariants(t *testing.T) {
	cfg, err := Parse([]byte(envBase), mapEnv(map[string]string{
		"OUTBOX_RELAY_DATABASE_BILLING_EU_DSN_FILE":       writeSecret(t, "postgres://file/billing\n"),
		"OUTBOX_RELAY_SINK_MAIN_KAFKA_BROKERS_FILE":       writeSecret(t, "x:9092\ny:9092\n"),
		"OUTBOX_RELAY_SINK_MAIN_KAFKA_SASL_PASSWORD_FILE": writeSecret(t, "pa ss\n\n"),
		"OUTBOX_RELAY_LOG_LEVEL_FILE":                     writeSecret(t, "warn"),
		"OUTBOX_RELAY_ADMIN_LISTEN_FILE":                  writeSecret(t, ":8080\r\n"),
	}))
	if err != nil {
		t.Fatal(err)
	}
	if got := cfg.Databases["billing-eu"].DSN; got != "postgres://file/billing" {
		t.Errorf("dsn = %q", got)
	}
	if got := cfg.Sinks["main-kafka"].Brokers; !reflect.DeepEqual(got, []string{"x:9092", "y:9092"}) {
		t.Errorf("brokers = %q", got)
	}
	if got := cfg.Sinks["main-kafka"].SASL.Password; got != "pa ss" {
		t.Errorf("password = %q, want trailing newlines trimmed only", got)
	}
	if cfg.Log.Level != "warn" || cfg.Admin.Listen != ":8080" {
		t.Errorf("log.level = %q, admin.listen = %q", cfg.Log.Level, cfg.Admin.Listen)
	}
}

func TestEnvOverrideErrors(t *testing.T) {
	secret := writeSecret(t, "value\n")
	tests := []struct {
		name string
		env  map[string]string
		want []string
	}{
		{
			name: "both set",
			env: map[string]string{
				"OUTBOX_RELAY_DATABASE_BILLING_EU_DSN":      "postgres://a",
				"OUTBOX_RELAY_DATABASE_BILLING_EU_DSN_FILE": secret,
				"OUTBOX_RELAY_LOG_LEVEL":                    "info",
				"OUTBOX_RELAY_LOG_LEVEL_FILE":               secret,
			},
			want: []string{
				"databases.billing-eu.dsn: OUTBOX_RELAY_DATABASE_BILLING_EU_DSN and OUTBOX_RELAY_DATABASE_BILLING_EU_DSN_FILE are both set; set only one",
				"log.level: OUTBOX_RELAY_LOG_LEVEL and OUTBOX_RELAY_LOG_LEVEL_FILE are both set",
			},
		},
		{
			name: "missing file",
			env:  map[string]string{"OUTBOX_RELAY_SINK_MAIN_KAFKA_SASL_PASSWORD_FILE": filepath.Join(t.TempDir(), "nope")},
			want: []string{"sinks.main-kafka.sasl.password: OUTBOX_RELAY_SINK_MAIN_KAFKA_SASL_PASSWORD_FILE: open "},
		},
		{
			name: "empty file",
			env:  map[string]string{"OUTBOX_RELAY_ADMIN_LISTEN_FILE": writeSecret(t, "\n")},
			want: []string{"admin.listen: OUTBOX_RELAY_ADMIN_LISTEN_FILE: file ", " is empty"},
		},
		{
			name: "no brokers",
			env:  map[string]string{"OUTBOX_RELAY_SINK_MAIN_KAFKA_BROKERS": " , "},
			want: []string{"sinks.main-kafka.brokers: OUTBOX_RELAY_SINK_MAIN_KAFKA_BROKERS lists no brokers"},
		},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			_, err := Parse([]byte(envBase), mapEnv(tt.env))
			if err == nil {
				t.Fatal("Parse succeeded, want an error")
			}
			for _, w := range tt.want {
				if !strings.Contains(err.Error(), w) {
					t.Errorf("error does not contain %q:\n%v", w, err)
				}
			}
		})
	}
}

func TestEnvAmbiguousNames(t *testing.T) {
	doc := `
databases:
  a-b: {dsn: postgres://one}
  a_b: {dsn: postgres://two}
sinks:
  k: {type: kafka, brokers: [k:9092]}
sources:
  - {name: s, database: a-b, table: public.outbox}
`
	if _, err := Parse([]byte(doc), nil); err != nil {
		t.Fatalf("unset override must not be ambiguous: %v", err)
	}
	_, err := Parse([]byte(doc), mapEnv(map[string]string{"OUTBOX_RELAY_DATABASE_A_B_DSN": "postgres://x"}))
	if err == nil || !strings.Contains(err.Error(), `databases.a_b.dsn: OUTBOX_RELAY_DATABASE_A_B_DSN also matches database "a-b"`) {
		t.Errorf("err = %v", err)
	}
}

func TestDatabaseURL(t *testing.T) {
	one := `
databases:
  app: {}
sinks:
  k: {type: kafka, brokers: [k:9092]}
sources:
  - {name: s, table: public.outbox}
`
	env := map[string]string{"DATABASE_URL": "postgres://url/app"}
	cfg, err := Parse([]byte(one), mapEnv(env))
	if err != nil {
		t.Fatal(err)
	}
	if got := cfg.Databases["app"].DSN; got != "postgres://url/app" {
		t.Errorf("dsn = %q", got)
	}

	// The specific override wins over DATABASE_URL.
	env["OUTBOX_RELAY_DATABASE_APP_DSN"] = "postgres://specific/app"
	if cfg, err = Parse([]byte(one), mapEnv(env)); err != nil {
		t.Fatal(err)
	}
	if got := cfg.Databases["app"].DSN; got != "postgres://specific/app" {
		t.Errorf("dsn = %q, want the OUTBOX_RELAY_ override", got)
	}

	// A dsn in the file wins over DATABASE_URL.
	withDSN := strings.Replace(one, "app: {}", "app: {dsn: postgres://file/app}", 1)
	if cfg, err = Parse([]byte(withDSN), mapEnv(map[string]string{"DATABASE_URL": "postgres://url/app"})); err != nil {
		t.Fatal(err)
	}
	if got := cfg.Databases["app"].DSN; got != "postgres://file/app" {
		t.Errorf("dsn = %q, want the file's", got)
	}
}

func TestEnvNames(t *testing.T) {
	if got := DatabaseDSNEnv("billing-eu.v2"); got != "OUTBOX_RELAY_DATABASE_BILLING_EU_V2_DSN" {
		t.Errorf("DatabaseDSNEnv = %q", got)
	}
	if got := SinkBrokersEnv("main"); got != "OUTBOX_RELAY_SINK_MAIN_BROKERS" {
		t.Errorf("SinkBrokersEnv = %q", got)
	}
	if got := SinkSASLPasswordEnv("Main_Kafka"); got != "OUTBOX_RELAY_SINK_MAIN_KAFKA_SASL_PASSWORD" {
		t.Errorf("SinkSASLPasswordEnv = %q", got)
	}
}

// TestOverrideWinsOverAnUnsetReference is the README's own example: the
// file says `dsn: ${DATABASE_URL}` and the deployment sets only the
// override; a reference in a field that is not overridden still must
// resolve.
func TestOverrideWinsOverAnUnsetReference(t *testing.T) {
	doc := `
databases:
  main:
    dsn: ${DATABASE_URL}
sinks:
  kafka:
    type: kafka
    brokers: ["${KAFKA_BROKER}"]
    sasl: {mechanism: PLAIN, username: relay, password: "${KAFKA_PASSWORD}"}
sources:
  - name: billing
    table: billing.outbox
`
	cfg, err := Parse([]byte(doc), mapEnv(map[string]string{
		"OUTBOX_RELAY_DATABASE_MAIN_DSN":        "postgres://env/main",
		"OUTBOX_RELAY_SINK_KAFKA_BROKERS_FILE":  writeSecret(t, "k1:9092,k2:9092\n"),
		"OUTBOX_RELAY_SINK_KAFKA_SASL_PASSWORD": "secret",
	}))
	if err != nil {
		t.Fatal(err)
	}
	if got := cfg.Databases["main"].DSN; got != "postgres://env/main" {
		t.Errorf("dsn = %q", got)
	}
	if got := cfg.Sinks["kafka"].Brokers; !reflect.DeepEqual(got, []string{"k1:9092", "k2:9092"}) {
		t.Errorf("brokers = %q", got)
	}
	_, err = Parse([]byte(doc), mapEnv(map[string]string{"OUTBOX_RELAY_DATABASE_MAIN_DSN": "postgres://env/main"}))
	if err == nil || !strings.Contains(err.Error(), "KAFKA_BROKER") || strings.Contains(err.Error(), "DATABASE_URL") {
		t.Errorf("with only the dsn overridden: %v; want the unset KAFKA_BROKER named, not DATABASE_URL", err)
	}
}

// TestAdminToken: the admin API's token comes from admin.token,
// admin.token_file, OUTBOX_RELAY_ADMIN_TOKEN or its _FILE variant; the
// variable wins over both settings of the file.
func TestAdminToken(t *testing.T) {
	file := writeSecret(t, "from-token-file\n")
	tests := []struct {
		name, admin string
		env         map[string]string
		want        string
	}{
		{"none", ``, nil, ""},
		{"token", `{token: from-yaml}`, nil, "from-yaml"},
		{"token_file", `{token_file: ` + file + `}`, nil, "from-token-file"},
		{"env", `{token: from-yaml}`, map[string]string{"OUTBOX_RELAY_ADMIN_TOKEN": "from-env"}, "from-env"},
		{"env over token_file", `{token_file: ` + file + `}`, map[string]string{"OUTBOX_RELAY_ADMIN_TOKEN": "from-env"}, "from-env"},
		{"env _FILE", ``, map[string]string{"OUTBOX_RELAY_ADMIN_TOKEN_FILE": writeSecret(t, "from-env-file\r\n")}, "from-env-file"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			doc := envBase
			if tt.admin != "" {
				doc += "admin: " + tt.admin + "\n"
			}
			env := map[string]string{"DATABASE_URL": "postgres://h/db"}
			for k, v := range tt.env {
				env[k] = v
			}
			cfg, err := Parse([]byte(doc), mapEnv(env))
			if err != nil {
				t.Fatal(err)
			}
			got, err := cfg.Admin.BearerToken()
			if err != nil || got != tt.want {
				t.Errorf("token %q (%v), want %q", got, err, tt.want)
			}
			if cfg.Admin.Listen != "127.0.0.1:9090" {
				t.Errorf("admin.listen defaults to %q, want 127.0.0.1:9090 (this machine only)", cfg.Admin.Listen)
			}
		})
	}
	both := envBase + "admin: {token: a, token_file: " + file + "}\n"
	if _, err := Parse([]byte(both), mapEnv(map[string]string{"DATABASE_URL": "postgres://h/db"})); err == nil ||
		!strings.Contains(err.Error(), "admin.token_file: set admin.token or admin.token_file, not both") {
		t.Errorf("token and token_file both set: %v", err)
	}
	empty := Admin{TokenFile: writeSecret(t, "\n")}
	if _, err := empty.BearerToken(); err == nil || !strings.Contains(err.Error(), "is empty") {
		t.Errorf("an empty token_file: %v", err)
	}
}
