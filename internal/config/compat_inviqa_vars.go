package config

// The settings of inviqa/kafka-outbox-relay (image
// quay.io/inviqa_images/kafka-outbox-relay), which [FromInviqa] reads so that
// a deployment of it can switch to outbox-relay by changing its image alone.
// They are read there by go-arg from the struct tags of config/config.go
// (each variable also has a command-line flag), except LOG_LEVEL
// (log/logger.go) and the NEW_RELIC_* variables of its New Relic agent
// (newrelic/agent.go and the agent's ConfigFromEnvironment). Its HTTP
// server for /metrics and /healthz listens on :80 (prometheus/http.go).

// InviqaVar is one setting of inviqa/kafka-outbox-relay.
type InviqaVar struct {
	Env  string // environment variable
	Flag string // its command-line flag, without "--"; empty when it has none
	Bool bool   // a boolean: the flag alone means true
	// Setting says what the variable becomes here, or why it is ignored.
	Setting string
}

// Names of inviqa/kafka-outbox-relay's variables.
const (
	InviqaDBDriver             = "DB_DRIVER"
	InviqaDBHost               = "DB_HOST"
	InviqaDBPort               = "DB_PORT"
	InviqaDBUser               = "DB_USER"
	InviqaDBPass               = "DB_PASS"
	InviqaDBName               = "DB_NAME"
	InviqaDBSchema             = "DB_SCHEMA"       // v0 name of DB_NAME
	InviqaDBOutboxTable        = "DB_OUTBOX_TABLE" // v0 only; v1 fixes kafka_outbox
	InviqaKafkaHost            = "KAFKA_HOST"
	InviqaKafkaPublishAttempts = "KAFKA_PUBLISH_ATTEMPTS"
	InviqaTLSEnable            = "TLS_ENABLE"
	InviqaTLSSkipVerifyPeer    = "TLS_SKIP_VERIFY_PEER"
	InviqaWriteConcurrency     = "WRITE_CONCURRENCY"
	InviqaPollFrequencyMs      = "POLL_FREQUENCY_MS"
	InviqaBatchSize            = "BATCH_SIZE"
	InviqaSkipMigrations       = "SKIP_MIGRATIONS"
	InviqaEnableMigrations     = "ENABLE_MIGRATIONS" // v0 only
	InviqaPollingDisabled      = "POLLING_DISABLED"
	InviqaRunCleanup           = "RUN_CLEANUP"
	InviqaRunOptimize          = "RUN_OPTIMIZE"
	InviqaSidecarProxyURL      = "SIDECAR_PROXY_URL"
	InviqaLogLevel             = "LOG_LEVEL"
	// InviqaNewRelicPrefix starts the variables of its New Relic agent
	// (NEW_RELIC_LICENSE_KEY, NEW_RELIC_APP_NAME, NEW_RELIC_ENV, ...).
	InviqaNewRelicPrefix = "NEW_RELIC_"
)

// Defaults of inviqa/kafka-outbox-relay that [FromInviqa] keeps, so that an
// unchanged deployment behaves as it did.
const (
	InviqaDefaultPublishAttempts = 3
	InviqaDefaultBatchSize       = 250
	InviqaDefaultPollFrequency   = 500 // milliseconds
	InviqaTable                  = "kafka_outbox"
	InviqaAdminListen            = ":80"
	InviqaSinkName               = "kafka"
)

// InviqaVars lists every setting of inviqa/kafka-outbox-relay, in the order
// of its configuration struct, then LOG_LEVEL.
var InviqaVars = []InviqaVar{
	{Env: InviqaPollingDisabled, Flag: "polling-disabled", Bool: true,
		Setting: "no relaying: the table is migrated (unless migrations are skipped), then the process idles until stopped"},
	{Env: InviqaSkipMigrations, Flag: "skip-migrations", Bool: true,
		Setting: "sources[].manage_table: false (the relay's own schema is still migrated)"},
	{Env: InviqaEnableMigrations, Flag: "enable-migrations", Bool: true,
		Setting: "sources[].manage_table (v0 name; the opposite of SKIP_MIGRATIONS)"},
	{Env: InviqaDBHost, Flag: "db-host", Setting: "databases.<db>.dsn host"},
	{Env: InviqaDBPort, Flag: "db-port", Setting: "databases.<db>.dsn port"},
	{Env: InviqaDBUser, Flag: "db-user", Setting: "databases.<db>.dsn user"},
	{Env: InviqaDBPass, Flag: "db-pass", Setting: "databases.<db>.dsn password"},
	{Env: InviqaDBName, Flag: "db-name",
		Setting: "databases.<db>.dsn database; a comma-separated list gives one database and one source each"},
	{Env: InviqaDBSchema, Flag: "db-schema", Setting: "as DB_NAME (its v0 name)"},
	{Env: InviqaDBDriver, Flag: "db-driver", Setting: "databases.<db>.driver: postgres or mysql"},
	{Env: InviqaDBOutboxTable, Flag: "db-outbox-table", Setting: "sources[].table (v0 only; default kafka_outbox)"},
	{Env: InviqaKafkaHost, Flag: "kafka-host", Setting: "sinks.kafka.brokers (comma-separated)"},
	{Env: InviqaKafkaPublishAttempts, Flag: "kafka-publish-attempts", Setting: "sources[].max_attempts (default 3)"},
	{Env: InviqaTLSEnable, Flag: "kafka-tls", Bool: true,
		Setting: "sinks.kafka.tls.enabled, and TLS to the database (sslmode=verify-full, tls=true)"},
	{Env: InviqaTLSSkipVerifyPeer, Flag: "kafka-tls-verify-peer", Bool: true,
		Setting: "sinks.kafka.tls.insecure_skip_verify, and sslmode=require (tls=skip-verify) for the database"},
	{Env: InviqaWriteConcurrency, Flag: "write-concurrency", Setting: "sources[].pipeline (default 2)"},
	{Env: InviqaPollFrequencyMs, Flag: "poll-frequency-ms", Setting: "sources[].poll.max (default 500ms)"},
	{Env: InviqaRunCleanup, Flag: "cleanup", Bool: true,
		Setting: "one-shot job: delete rows delivered more than an hour ago, then exit"},
	{Env: InviqaRunOptimize, Flag: "optimize", Bool: true,
		Setting: "one-shot job: VACUUM (OPTIMIZE TABLE on MySQL) the table, then exit"},
	{Env: InviqaSidecarProxyURL, Flag: "sidecar-proxy-url",
		Setting: "after a one-shot job, POST <url>/quitquitquit so that the job's proxy sidecar stops too"},
	{Env: InviqaBatchSize, Flag: "batch-size", Setting: "sources[].batch_size (default 250)"},
	{Env: InviqaLogLevel, Setting: "log.level (trace is debug, fatal and panic are error)"},
	{Env: InviqaNewRelicPrefix + "*",
		Setting: "ignored: outbox-relay has no New Relic agent; it serves Prometheus metrics on admin.listen"},
}

// InviqaPresent reports whether env holds the configuration of an
// inviqa/kafka-outbox-relay deployment: DB_DRIVER and DB_HOST, which it
// always requires, are both set.
func InviqaPresent(env func(string) (string, bool)) bool {
	if env == nil {
		return false
	}
	d, _ := env(InviqaDBDriver)
	h, _ := env(InviqaDBHost)
	return d != "" && h != ""
}
