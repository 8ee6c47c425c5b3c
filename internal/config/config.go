package config

import (
	"time"

	"github.com/outbox-relay/outbox-relay/internal/config/sinkblock"
	"github.com/outbox-relay/outbox-relay/internal/layout"
	"github.com/outbox-relay/outbox-relay/internal/tlsconf"
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

// Database is one database connection, or an entry that stands for many
// databases (a database per tenant): a list of them (dsns) or a rule that
// discovers them on a server (discover). Each database of such an entry is
// relayed as one of its own, named `<entry>/<database>`, with its own
// connections, relay schema, leases and copy of every source naming the
// entry (`<source>@<entry>/<database>`).
type Database struct {
	Driver string `yaml:"driver"` // postgres (default) or mysql
	// DSN is the connection string: postgres://user:password@host:5432/db
	// for PostgreSQL, user:password@tcp(host:3306)/db for MySQL. With
	// Discover it names the server whose databases are discovered (on
	// PostgreSQL, the database whose catalogue is read). Not needed when
	// DSNs is set.
	DSN string `yaml:"dsn"`
	// DSNs lists databases of their own, each named after the database its
	// connection string names; not with DSN.
	DSNs []string `yaml:"dsns"`
	// Discover finds the databases on the server DSN names, and looks
	// again every interval.
	Discover *DatabaseDiscover `yaml:"discover"`
	// MaxConns bounds the connections to the database; for an entry with
	// DSNs or Discover, to each of its databases.
	MaxConns int `yaml:"max_conns"`
}

// DatabaseDiscover finds the databases of a server by name: those Pattern
// matches, or those Query returns. Exactly one of the two is set.
type DatabaseDiscover struct {
	// Pattern is a glob on database names (`tenant_*`: `*` any run of
	// characters, `?` one, `[a-z]` one of a set, `[!a-z]` one not in it),
	// or `regex:` and a regular expression that matches anywhere unless
	// anchored (`regex:^tenant_[0-9]+$`). On PostgreSQL template databases
	// are never found; on MySQL neither are the system schemas nor the
	// relay's own database.
	Pattern string `yaml:"pattern"`
	// Query is a SELECT (or SHOW DATABASES) returning the names of the
	// databases in its first column, run where dsn connects: a tenant
	// registry, say.
	Query string `yaml:"query"`
	// Interval is how often the databases are looked for again: a new one
	// is taken up, a vanished one let go. Default 1m.
	Interval Duration `yaml:"interval"`
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
	// call past it leaves its rows pending and opens the circuit, so it is
	// how soon a sink that stalls (a connection that holds every byte) is
	// found out. Set it above the sink's own delivery or confirm timeout.
	Timeout Duration `yaml:"timeout"`
	// BatchWait is how long a batch waits for the sink's answer. Rows whose
	// call has not answered by then are given back, charged no attempt,
	// their keys held, and are tried again later; the rest of the batch
	// completes and the source goes on claiming. The call itself goes on in
	// the background until timeout; at most a source's pipeline of such
	// calls run at once for each of its routes, and meanwhile the sink's
	// rows are given back at once. A sink whose answers regularly take
	// longer than this should have it raised: each call it is given up on
	// delays its rows by a hold. 0 waits for every call to end (as long as
	// timeout). Has no effect with delivery exactly_once.
	BatchWait Duration `yaml:"batch_wait"`
	// Circuit stops calling a sink that keeps failing: its rows wait,
	// without holding the source's other sinks.
	Circuit Circuit `yaml:"circuit"`

	// Blocks holds the blocks set under the sink's own keys: each type
	// other than Kafka keeps its settings in a block named after it,
	// defined by its package and registered with package sinkblock.
	Blocks Blocks `yaml:",inline"`
}

// Blocks are a sink's settings blocks by key, the name of the sink type
// each belongs to: {"rabbitmq": &rabbitmq.Config{...}}.
type Blocks map[string]sinkblock.Settings

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
type TLS = tlsconf.Config

// Source is one outbox table, or a rule that discovers several.
type Source struct {
	// Name identifies the source in logs, metrics, leases and commands; it
	// must be unique.
	Name     string `yaml:"name"`
	Database string `yaml:"database"` // key of Databases; default: the only one
	// Table is schema-qualified: "journey_matcher.outbox" or
	// `tenant."OutboxEvent"`. Exactly one of Table and Discover is set. On
	// an entry with dsns or discover, "{database}" stands for each
	// database's name: on MySQL, where the schema is the database,
	// "{database}.kafka_outbox".
	Table    string    `yaml:"table"`
	Discover *Discover `yaml:"discover"`
	// Capture is how the relay finds the source's rows: poll (default)
	// claims pending rows and writes their state in the table; cursor reads
	// an append-only table in batches bounded by transaction snapshots and
	// keeps its position in the relay's schema, writing nothing to the
	// table (PostgreSQL, a layout with xid_column; the layout's state is
	// ignored; not with shards, retention, event_priority nor delivery
	// exactly_once); wal reads the table's inserts from PostgreSQL's
	// logical replication (a publication and a slot per source, see
	// docs/capture.md) in commit and insert order and still writes the
	// layout's state in the table (not with shards, event_priority, a queue
	// nor delivery exactly_once). See docs/capture.md.
	Capture string `yaml:"capture"`
	// Preset names a built-in layout (see internal/layout); Layout overrides
	// its fields one by one.
	Preset string      `yaml:"preset"`
	Layout layout.Spec `yaml:"layout"`
	Sink   string      `yaml:"sink"` // key of Sinks; default: the only one
	// Topic, when set, replaces the layout's topic template.
	Topic string `yaml:"topic"`
	// Schema names a JSON Schema file (a path from the working directory)
	// that payloads sent to Sink must meet; a payload it refuses is
	// dead-lettered with the schema's reason, never sent.
	Schema string `yaml:"schema"`
	// Routes send some events elsewhere: the first route whose conditions
	// a row meets decides its sink (and topic); rows that meet none go to
	// Sink and Topic.
	Routes    []Route `yaml:"routes"`
	BatchSize int     `yaml:"batch_size"` // default 500
	Pipeline  int     `yaml:"pipeline"`   // batches in flight, default 2
	// Shards splits the source into this many buckets by a hash of each
	// row's order key (of its id when it has none, or with ordering off).
	// Each bucket is claimed by a worker of its own under a lease of its
	// own, named after the source and the bucket (orders/0, orders/1, ...),
	// so that several replicas relay one busy table side by side; a key's
	// rows are all in one bucket and keep their order. With 1, the whole
	// source is one lease, named after the source.
	Shards int `yaml:"shards"`
	// Priority orders the claims of the sources of one database when they
	// wait for its connections: a source of higher priority claims first;
	// sources of equal priority take turns, a batch each. Default 0.
	Priority int `yaml:"priority"`
	// EventPriority has the source's claims take some events first:
	// those whose column matches the first class, then the second, and so
	// on, the others last. With ordering, an event is taken together with
	// the earlier events of its key, never before them. A claim looks
	// among the first lookahead pending events, in the source's order.
	EventPriority *EventPriority `yaml:"event_priority"`
	Ordering      *bool          `yaml:"ordering"`     // per-key order, default true
	MaxAttempts   int            `yaml:"max_attempts"` // default 10
	Backoff       Backoff        `yaml:"backoff"`
	Poll          Poll           `yaml:"poll"`
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

// EventPriority has a source's claims take some of its events before the
// others: those whose column matches the first class, then the second,
// and so on; events that match none come last. With ordering, an event is
// taken together with the earlier events of its key, never before them.
// A claim looks for them among the first lookahead pending events of the
// source, in its order: the events beyond wait their turn.
type EventPriority struct {
	// Column is the column matched, as text. Default: the layout's
	// event_type column.
	Column string `yaml:"column"`
	// Classes are patterns, the most urgent first: "*" stands for any run
	// of characters ("kitchen.task.*"), the rest is matched exactly,
	// case included.
	Classes []string `yaml:"classes"`
	// Lookahead is how many pending events a claim considers. Default:
	// 10 times batch_size.
	Lookahead int `yaml:"lookahead"`
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
