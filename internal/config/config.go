package config

import (
	"time"

	"github.com/outbox-relay/outbox-relay/internal/sink/mqtt"
	"github.com/outbox-relay/outbox-relay/internal/sink/nats"
	"github.com/outbox-relay/outbox-relay/internal/sink/rabbitmq"
	"github.com/outbox-relay/outbox-relay/internal/sink/redis"
	"github.com/outbox-relay/outbox-relay/internal/sink/sinktls"
	"github.com/outbox-relay/outbox-relay/internal/sink/webhook"
)

// Config is the whole relay configuration.
type Config struct {
	// RelaySchema is where the relay keeps its own tables (relay_state,
	// failed_events, retry_state, leases). Default "outbox_relay".
	RelaySchema string   `yaml:"relay_schema"`
	Log         Log      `yaml:"log"`
	Admin       Admin    `yaml:"admin"`
	Shutdown    Shutdown `yaml:"shutdown"`
	// LeaseTTL is how long a source's lease lasts without renewal: each
	// source is relayed by one process at a time, and a replica takes over
	// a source whose owner stopped renewing. Default 15s.
	LeaseTTL  Duration            `yaml:"lease_ttl"`
	Databases map[string]Database `yaml:"databases"`
	Sinks     map[string]Sink     `yaml:"sinks"`
	Sources   []Source            `yaml:"sources"`
}

// Log configures structured logging.
type Log struct {
	Level  string `yaml:"level"`  // debug|info|warn|error, default info
	Format string `yaml:"format"` // json|text, default json
}

// Admin configures the HTTP server for /metrics, /healthz, /readyz, the
// console and the JSON admin API.
type Admin struct {
	// Listen is the address, default "127.0.0.1:9090" (this machine only);
	// ":9090" listens on every interface (probes, scrapes from elsewhere);
	// "off" disables the server.
	Listen string `yaml:"listen"`
	// Token is the bearer token that the console and the admin API's
	// changes (replaying and purging dead letters) need; without one they
	// are refused. TokenFile names a file holding it instead (mounted
	// secrets), read at start. OUTBOX_RELAY_ADMIN_TOKEN (or its _FILE
	// variant) wins over both.
	Token     string `yaml:"token"`
	TokenFile string `yaml:"token_file"`
}

// Shutdown bounds how long in-flight batches may take once a stop is asked.
type Shutdown struct {
	Timeout Duration `yaml:"timeout"` // default 30s
}

// Database is one database connection.
type Database struct {
	Driver string `yaml:"driver"` // postgres (default) or mysql
	// DSN is the connection string: postgres://user:password@host:5432/db
	// for PostgreSQL, user:password@tcp(host:3306)/db for MySQL.
	DSN      string `yaml:"dsn"`
	MaxConns int    `yaml:"max_conns"` // default 10
}

// Sink is one broker connection. Kafka's settings sit on the sink itself;
// every other type keeps its settings in a block named after it
// (sinks.<name>.rabbitmq, ...).
type Sink struct {
	Type             string   `yaml:"type"` // kafka|nats|rabbitmq|redis|mqtt|webhook
	Brokers          []string `yaml:"brokers"`
	ClientID         string   `yaml:"client_id"`          // default "outbox-relay"
	MaxMessageBytes  int      `yaml:"max_message_bytes"`  // default 1000000
	AutoCreateTopics bool     `yaml:"auto_create_topics"` // default false
	DeliveryTimeout  Duration `yaml:"delivery_timeout"`   // default 30s
	RecordRetries    int      `yaml:"record_retries"`     // default 10
	Linger           Duration `yaml:"linger"`             // default 0
	Compression      string   `yaml:"compression"`        // none|gzip|snappy|lz4|zstd, default none
	// Partitioner picks a keyed record's partition: murmur2 (the Java
	// client's, default) or sarama (FNV-1a, sarama's default hash
	// partitioner, for deployments moving from a sarama-based relay).
	Partitioner string `yaml:"partitioner"`
	SASL        *SASL  `yaml:"sasl"`
	TLS         *TLS   `yaml:"tls"`
	// ProgressTopic is where sources with delivery exactly_once record, in
	// each Kafka transaction, which events it carries: a compacted topic
	// (one partition is enough) that must exist unless auto_create_topics.
	ProgressTopic string `yaml:"progress_topic"`
	// TransactionTimeout is how long the broker lets an exactly-once
	// batch's transaction stay open before it aborts it (the batch is then
	// sent again). At most the broker's transaction.max.timeout.ms.
	TransactionTimeout Duration `yaml:"transaction_timeout"`

	// Timeout bounds one publish call to the sink, whatever its type: a
	// call past it leaves its rows pending and opens the circuit. Default
	// 35s; set it above the sink's own delivery or confirm timeout.
	Timeout Duration `yaml:"timeout"`
	// Circuit stops calling a sink that keeps failing: its rows wait,
	// without holding the source's other sinks.
	Circuit Circuit `yaml:"circuit"`

	RabbitMQ *rabbitmq.Config `yaml:"rabbitmq"`
	MQTT     *mqtt.Config     `yaml:"mqtt"`
	Webhook  *webhook.Config  `yaml:"webhook"`
	NATS     *nats.Config     `yaml:"nats"`
	Redis    *redis.Config    `yaml:"redis"`
}

// Circuit is a sink's circuit breaker.
type Circuit struct {
	// Failures is how many publish calls in a row that fail (retryably)
	// open the circuit. Default 5.
	Failures int `yaml:"failures"`
	// Cooldown is how long the circuit stays open before one probe call;
	// it doubles after each failed probe up to MaxCooldown. Defaults 1s
	// and 30s.
	Cooldown    Duration `yaml:"cooldown"`
	MaxCooldown Duration `yaml:"max_cooldown"`
}

// SASL authenticates to Kafka.
type SASL struct {
	Mechanism string `yaml:"mechanism"` // PLAIN|SCRAM-SHA-256|SCRAM-SHA-512
	// Username and Password are the SASL credentials.
	Username string `yaml:"username"`
	Password string `yaml:"password"`
}

// TLS secures the broker connection: the same block every sink type uses.
type TLS = sinktls.Config

// Source is one outbox table, or a rule that discovers several.
type Source struct {
	// Name identifies the source in logs, metrics, leases and commands; it
	// must be unique.
	Name     string `yaml:"name"`
	Database string `yaml:"database"` // key of Databases; default: the only one
	// Table is schema-qualified: "journey_matcher.outbox" or
	// `tenant."OutboxEvent"`. Exactly one of Table and Discover is set.
	Table    string    `yaml:"table"`
	Discover *Discover `yaml:"discover"`
	// Preset names a built-in layout (see internal/layout); Layout overrides
	// its fields one by one.
	Preset string `yaml:"preset"`
	Layout Layout `yaml:"layout"`
	Sink   string `yaml:"sink"` // key of Sinks; default: the only one
	// Topic, when set, replaces the layout's topic template.
	Topic string `yaml:"topic"`
	// Schema names a JSON Schema file (a path from the working directory)
	// that payloads sent to Sink must meet; a payload it refuses is
	// dead-lettered with the schema's reason, never sent.
	Schema string `yaml:"schema"`
	// Routes send some events elsewhere: the first route whose conditions
	// a row meets decides its sink (and topic); rows that meet none go to
	// Sink and Topic.
	Routes      []Route `yaml:"routes"`
	BatchSize   int     `yaml:"batch_size"`   // default 500
	Pipeline    int     `yaml:"pipeline"`     // batches in flight, default 2
	Ordering    *bool   `yaml:"ordering"`     // per-key order, default true
	MaxAttempts int     `yaml:"max_attempts"` // default 10
	Backoff     Backoff `yaml:"backoff"`
	Poll        Poll    `yaml:"poll"`
	// Notify is auto|on|off: LISTEN for wake-ups (auto: when the trigger is
	// there or can be installed). Default auto.
	Notify string `yaml:"notify"`
	// InstallTrigger lets the relay create the NOTIFY trigger on the table
	// when its role may. Default true.
	InstallTrigger *bool `yaml:"install_trigger"`
	// ManageTable makes the relay create and upgrade the outbox table itself
	// (migrate, and at start), for layouts whose table the relay owns: the
	// kafka_outbox table of preset kafka-outbox. Default true for that
	// preset, false otherwise.
	ManageTable *bool `yaml:"manage_table"`
	// ClaimTimeout bounds how long a claim may stay open: the database ends
	// a claim of this relay that is idle longer (a hung relay), and a row
	// that another relay marked claimed (state.batch_id and
	// state.claimed_at) without finishing it is taken back once its claim
	// is older. Default 10m.
	ClaimTimeout Duration `yaml:"claim_timeout"`
	// Readiness says when the source counts as stuck: /readyz fails naming
	// it, and `outbox-relay status` exits non-zero.
	Readiness Readiness `yaml:"readiness"`
	// Reaper settles abandoned dispatches of a source in state mode queue.
	Reaper Reaper `yaml:"reaper"`
	// Delivery is at_least_once (default) or exactly_once: with a Kafka
	// sink, each batch is one Kafka transaction with the source's progress,
	// and read_committed consumers see every event once, whatever crashes.
	Delivery string `yaml:"delivery"`
	// MaxInFlight, when set, bounds the dispatches in flight to the
	// source's own sink (routes have their own): at most this many keys'
	// events at once, each key's in one call of its own.
	MaxInFlight int `yaml:"max_in_flight"`
	// Retention, when set, has the running relay delete old settled rows.
	Retention *Retention `yaml:"retention"`
}

// Readiness are the thresholds past which a source is stuck.
type Readiness struct {
	// MaxOldestPending: the oldest pending event older than this. Default 5m.
	MaxOldestPending Duration `yaml:"max_oldest_pending"`
	// MaxClaimFailure: every claim failing for longer than this. Default 30s.
	MaxClaimFailure Duration `yaml:"max_claim_failure"`
}

// Route sends the events that meet its conditions to another sink. Every
// condition given must hold; a list holds when the row's value is any of it.
type Route struct {
	// Name labels the route in logs and metrics; default "route<N>".
	Name string `yaml:"name"`
	// EventTypes and AggregateTypes match the layout's event_type and
	// aggregate_type columns.
	EventTypes     []string `yaml:"event_types"`
	AggregateTypes []string `yaml:"aggregate_types"`
	// Column and Values match any column of the table, compared as text.
	Column string   `yaml:"column"`
	Values []string `yaml:"values"`
	Sink   string   `yaml:"sink"` // key of Sinks; required
	// Topic, when set, replaces the topic template for this route's events
	// (a URL path for webhooks, a channel for Ably, a subject for NATS).
	Topic string `yaml:"topic"`
	// Schema names a JSON Schema file that the route's payloads must meet.
	Schema string `yaml:"schema"`
	// MaxInFlight, when set, bounds the route's dispatches in flight: at
	// most this many keys' events at once, each key's in one call of its
	// own (one request at a time per key with the webhook sink).
	MaxInFlight int `yaml:"max_in_flight"`
}

// Discover finds outbox tables by schema pattern: one source per table found.
type Discover struct {
	Schemas  string   `yaml:"schemas"`  // regular expression on schema names
	Tables   []string `yaml:"tables"`   // candidate table names, default [outbox, outbox_events]
	Interval Duration `yaml:"interval"` // re-check period, default 1m
}

// Backoff is the retry schedule: exponential with full jitter.
type Backoff struct {
	Initial Duration `yaml:"initial"` // default 1s
	Max     Duration `yaml:"max"`     // default 5m
}

// Poll is the adaptive poll used beside (or instead of) NOTIFY.
type Poll struct {
	Min Duration `yaml:"min"` // default 50ms
	Max Duration `yaml:"max"` // default 1s
	// Fallback is, when NOTIFY wakes the source, the longest wait between
	// claims of an idle source: a safety net for a missed notification.
	Fallback Duration `yaml:"fallback"`
	// Debounce is how long the relay waits after a NOTIFY for more before
	// it claims, so that a burst of inserts costs one claim.
	Debounce Duration `yaml:"debounce"`
}

// Layout maps an outbox table's columns to an event. Column fields name a
// column; template fields mix literal text with {column} references, e.g.
// "tenant:{tenantId}". Empty fields keep the preset's value.
type Layout struct {
	ID            string `yaml:"id"`             // column: the event's id (unique)
	Payload       string `yaml:"payload"`        // column: the message body (json, jsonb, text or bytea)
	PayloadFormat string `yaml:"payload_format"` // json (checked) or raw
	Topic         string `yaml:"topic"`          // template: the destination (topic, subject, routing key, URL path)
	Key           string `yaml:"key"`            // template: the message key
	PartitionKey  string `yaml:"partition_key"`  // template: places the message instead of the key
	OrderKey      string `yaml:"order_key"`      // template: what order is kept per; default the partition key, else the key
	Headers       string `yaml:"headers"`        // column holding a JSON object of headers
	// ExtraHeaders adds a header per entry, named by the key, its value the
	// template (e.g. tenant_id: "{tenantId}"); a template that renders
	// nothing (a NULL or empty column) adds no header.
	ExtraHeaders  map[string]string `yaml:"extra_headers"`
	EventType     string            `yaml:"event_type"`     // column: the event type (header, routes)
	AggregateType string            `yaml:"aggregate_type"` // column: the aggregate type (header, routes)
	AggregateID   string            `yaml:"aggregate_id"`   // column: the aggregate id (header)
	CreatedAt     string            `yaml:"created_at"`     // column: when the row was written (lag, retention)
	OrderBy       string            `yaml:"order_by"`       // column rows are claimed in; default created_at, else id
	XIDColumn     string            `yaml:"xid_column"`     // column of type xid8 filled with pg_current_xact_id(): claims in commit order
	RetryCount    string            `yaml:"retry_count"`    // column the relay counts failed attempts in
	MaxRetries    string            `yaml:"max_retries"`    // column: a row's own retry budget
	Error         string            `yaml:"error"`          // column the relay writes a dead letter's reason to
	State         State             `yaml:"state"`
}

// State says how a row's delivery state is recorded.
type State struct {
	Mode string `yaml:"mode"` // flag|timestamp|status|delete
	// Flag is the boolean column set true once published (mode flag).
	Flag string `yaml:"flag"`
	// PublishedAt lists candidate timestamp columns; the first that exists
	// is set to now() on publish (e.g. published_at, then processed_at).
	PublishedAt []string `yaml:"published_at"`
	Status      string   `yaml:"status"` // status column (mode status)
	// Pending, Published and Failed are the status column's values for
	// each state (mode status).
	Pending   string `yaml:"pending"`
	Published string `yaml:"published"`
	Failed    string `yaml:"failed"`
	// Errored is a boolean or integer column that marks a dead-lettered
	// row: a row is pending only while it is false (0), and a dead letter
	// sets it true (1). Replaying the dead letter clears it.
	Errored string `yaml:"errored"`
	// BatchID and ClaimedAt are the columns a relay records its claims in
	// (kafka_outbox's batch_id and push_started_at): an acknowledged row
	// gets the claim's batch id and time. A row another relay claimed and
	// never finished (batch id set, not delivered) is pending again once
	// its claim is older than the source's claim_timeout. Set both or
	// neither.
	BatchID   string `yaml:"batch_id"`
	ClaimedAt string `yaml:"claimed_at"`
	// Queue describes mode queue.
	Queue Queue `yaml:"queue"`
}

// Queue is mode queue: the table is a hot queue whose rows are deleted when
// claimed, each claim and each outcome appended to an archive table
// (Attempts) in the same transaction; a retry puts the row back. Rows of a
// participant are dispatched one at a time in sequence order. Columns of the
// archive named like a column of the table hold its copy.
type Queue struct {
	// Attempts is the archive table ("schema.table"; the table's schema
	// when unqualified).
	Attempts string `yaml:"attempts"`
	// Participant and Sequence are the columns (of both tables) of the
	// participant and its sequence number, which dispatch follows strictly.
	Participant string `yaml:"participant"`
	Sequence    string `yaml:"sequence"`
	// Due is the table's column of when a row may be claimed.
	Due string `yaml:"due"`
	// AttemptNo and Status are the archive's attempt number (1 first) and
	// state columns; the states are named by States.
	AttemptNo string      `yaml:"attempt_no"`
	Status    string      `yaml:"status"`
	States    QueueStates `yaml:"states"`
	// ClaimedAt and CompletedAt are the archive's claim and outcome times.
	ClaimedAt   string `yaml:"claimed_at"`
	CompletedAt string `yaml:"completed_at"`
	// RailReference and RailCode record what the destination answered (its
	// reference for the dispatch, its code); ErrorCode and ErrorMessage a
	// failure; LatencyMS the dispatch's duration. Optional columns.
	RailReference string `yaml:"rail_reference"`
	RailCode      string `yaml:"rail_code"`
	ErrorCode     string `yaml:"error_code"`
	ErrorMessage  string `yaml:"error_message"`
	LatencyMS     string `yaml:"latency_ms"`
	// Channel is the NOTIFY channel the table's trigger signals.
	Channel string `yaml:"channel"`
}

// QueueStates are the values of the archive's state column.
type QueueStates struct {
	// Dispatching is appended when a row is claimed, before its dispatch.
	Dispatching string `yaml:"dispatching"`
	// Dispatched is the destination's acceptance.
	Dispatched string `yaml:"dispatched"`
	// Retryable is a failure worth another attempt: the row is put back.
	Retryable string `yaml:"retryable"`
	// Failed is a terminal failure: the dead letter.
	Failed string `yaml:"failed"`
	// Zombie is the reaper's outcome for an attempt left without one.
	Zombie string `yaml:"zombie"`
}

// Reaper settles dispatches whose relay died mid-dispatch (state mode
// queue): an attempt with no outcome after Timeout is recorded as a zombie
// and its row put back. The lease holder runs it every Interval.
type Reaper struct {
	// Timeout is how long an attempt may stay without an outcome before
	// the reaper takes it for abandoned; it must exceed the sinks'
	// timeouts.
	Timeout Duration `yaml:"timeout"`
	// Interval is how often the lease holder runs the reaper.
	Interval Duration `yaml:"interval"`
}

// Duration is a time.Duration written as "250ms", "1m".
type Duration time.Duration

// D returns the value as a time.Duration.
func (d Duration) D() time.Duration { return time.Duration(d) }
