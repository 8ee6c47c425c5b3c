package config

import (
	"strconv"
	"strings"
	"time"
)

// Default values, applied by [Parse] and [Config.ApplyDefaults].
const (
	DefaultRelaySchema     = "outbox_relay"
	DefaultLogLevel        = "info"
	DefaultLogFormat       = "json"
	DefaultAdminListen     = "127.0.0.1:9090"
	DefaultShutdownTimeout = 30 * time.Second
	DefaultLeaseTTL        = 15 * time.Second

	DefaultDatabaseDriver   = "postgres"
	DefaultDatabaseMaxConns = 10
	// DefaultMemberMaxConns is the connection budget of each database of
	// an entry with dsns or discover: small, since there may be hundreds.
	DefaultMemberMaxConns = 4

	DefaultClientID        = "outbox-relay"
	DefaultMaxMessageBytes = 1_000_000
	DefaultDeliveryTimeout = 30 * time.Second
	// A sink's breaker: a call's bound, and its circuit.
	DefaultSinkTimeout = 10 * time.Second
	// DefaultSinkBatchWait is how long a batch waits for a sink's answer.
	DefaultSinkBatchWait      = 500 * time.Millisecond
	DefaultCircuitFailures    = 5
	DefaultCircuitCooldown    = time.Second
	DefaultCircuitMaxCooldown = 30 * time.Second
	DefaultRecordRetries      = 10
	DefaultCompression        = "none"

	DefaultBatchSize        = 500
	DefaultPipeline         = 2
	DefaultMaxAttempts      = 10
	DefaultBackoffInitial   = time.Second
	DefaultBackoffMax       = 5 * time.Minute
	DefaultPollMin          = 50 * time.Millisecond
	DefaultPollMax          = time.Second
	DefaultNotify           = "auto"
	DefaultDiscoverInterval = time.Minute
	DefaultClaimTimeout     = 10 * time.Minute
	DefaultMaxOldestPending = 5 * time.Minute
	DefaultMaxClaimFailure  = 30 * time.Second

	// ManagedTablePreset is the preset whose table the relay creates and
	// upgrades itself (manage_table defaults to true for it).
	ManagedTablePreset = "kafka-outbox"
	// QueuePreset is the payment dispatch queue's preset (state mode
	// queue); the relay creates its tables when manage_table is on.
	QueuePreset = "payment-queue"

	// The capture modes (sources[].capture).
	CapturePoll   = "poll"
	CaptureCursor = "cursor"

	DeliveryAtLeastOnce  = "at_least_once"
	DeliveryExactlyOnce  = "exactly_once"
	DefaultProgressTopic = "outbox_relay_progress"

	DefaultQueuePollFallback = time.Second
	DefaultQueueDebounce     = 30 * time.Millisecond
	DefaultPollFallback      = 10 * time.Second
	DefaultReaperTimeout     = 120 * time.Second
	DefaultReaperInterval    = time.Minute
)

// IsQueue reports whether the source's table is a queue (state mode queue,
// set itself or by its preset).
func (s *Source) IsQueue() bool {
	return s.Layout.State.Mode == "queue" || (s.Layout.State.Mode == "" && s.Preset == QueuePreset)
}

// DefaultDiscoverTables returns the table names discovery looks for when
// discover.tables is not set.
func DefaultDiscoverTables() []string { return []string{"outbox", "outbox_events"} }

// ApplyDefaults fills every field left at its zero value with its default.
// It is for configurations built in code; [Parse] applies defaults itself and
// keeps numbers and durations that the file sets to 0.
func (c *Config) ApplyDefaults() { c.applyDefaults(nil) }

// applyDefaults fills unset fields. explicit, when not nil, reports whether
// the file sets the number or duration at a path; such values are kept even
// when zero so that validation can judge them.
func (c *Config) applyDefaults(explicit func(path string) bool) {
	d := defaulter{explicit: explicit}
	d.str(&c.RelaySchema, DefaultRelaySchema)
	c.Log.Level = strings.ToLower(c.Log.Level)
	c.Log.Format = strings.ToLower(c.Log.Format)
	d.str(&c.Log.Level, DefaultLogLevel)
	d.str(&c.Log.Format, DefaultLogFormat)
	d.str(&c.Admin.Listen, DefaultAdminListen)
	d.dur(&c.Shutdown.Timeout, "shutdown.timeout", DefaultShutdownTimeout)
	d.dur(&c.LeaseTTL, "lease_ttl", DefaultLeaseTTL)

	for name, db := range c.Databases {
		p := "databases." + name
		d.str(&db.Driver, DefaultDatabaseDriver)
		if db.Multi() {
			d.int(&db.MaxConns, p+".max_conns", DefaultMemberMaxConns)
		} else {
			d.int(&db.MaxConns, p+".max_conns", DefaultDatabaseMaxConns)
		}
		if db.Discover != nil {
			disc := *db.Discover // copy: the caller may share the pointer
			d.dur(&disc.Interval, p+".discover.interval", DefaultDiscoverInterval)
			db.Discover = &disc
		}
		c.Databases[name] = db
	}
	for name, s := range c.Sinks {
		p := "sinks." + name
		d.int(&s.Circuit.Failures, p+".circuit.failures", DefaultCircuitFailures)
		d.dur(&s.Circuit.Cooldown, p+".circuit.cooldown", DefaultCircuitCooldown)
		d.dur(&s.Circuit.MaxCooldown, p+".circuit.max_cooldown", DefaultCircuitMaxCooldown)
		c.Sinks[name] = s
		if s.Type != "kafka" {
			if b := s.Block(); b != nil {
				b.Defaults()
			}
		} else {
			d.str(&s.ClientID, DefaultClientID)
			d.int(&s.MaxMessageBytes, p+".max_message_bytes", DefaultMaxMessageBytes)
			d.dur(&s.DeliveryTimeout, p+".delivery_timeout", DefaultDeliveryTimeout)
			d.int(&s.RecordRetries, p+".record_retries", DefaultRecordRetries)
			d.str(&s.Compression, DefaultCompression)
		}
		// A call's bound outlasts the sink's own wait for one message.
		own := s.ownTimeout()
		d.dur(&s.Timeout, p+".timeout", max(DefaultSinkTimeout, own+5*time.Second))
		d.dur(&s.BatchWait, p+".batch_wait", DefaultSinkBatchWait)
		c.Sinks[name] = s
	}
	for i := range c.Sources {
		c.sourceDefaults(d, i)
	}
}

func (c *Config) sourceDefaults(d defaulter, i int) {
	s := &c.Sources[i]
	p := "sources[" + strconv.Itoa(i) + "]"
	if s.Database == "" && len(c.Databases) == 1 {
		s.Database = sortedKeys(c.Databases)[0]
	}
	if s.Sink == "" && len(c.Sinks) == 1 {
		s.Sink = sortedKeys(c.Sinks)[0]
	}
	d.int(&s.BatchSize, p+".batch_size", DefaultBatchSize)
	d.int(&s.Pipeline, p+".pipeline", DefaultPipeline)
	d.int(&s.Shards, p+".shards", 1)
	if s.EventPriority != nil {
		d.int(&s.EventPriority.Lookahead, p+".event_priority.lookahead", 10*s.BatchSize)
	}
	d.int(&s.MaxAttempts, p+".max_attempts", DefaultMaxAttempts)
	d.dur(&s.Backoff.Initial, p+".backoff.initial", DefaultBackoffInitial)
	d.dur(&s.Backoff.Max, p+".backoff.max", DefaultBackoffMax)
	d.dur(&s.Poll.Min, p+".poll.min", DefaultPollMin)
	d.dur(&s.Poll.Max, p+".poll.max", DefaultPollMax)
	if s.IsQueue() {
		d.dur(&s.Poll.Fallback, p+".poll.fallback", DefaultQueuePollFallback)
		d.dur(&s.Poll.Debounce, p+".poll.debounce", DefaultQueueDebounce)
		d.dur(&s.Reaper.Timeout, p+".reaper.timeout", DefaultReaperTimeout)
		d.dur(&s.Reaper.Interval, p+".reaper.interval", DefaultReaperInterval)
	} else {
		d.dur(&s.Poll.Fallback, p+".poll.fallback", DefaultPollFallback)
	}
	d.str(&s.Notify, DefaultNotify)
	d.str(&s.Capture, CapturePoll)
	d.str(&s.Delivery, DeliveryAtLeastOnce)
	for j := range s.Routes {
		d.str(&s.Routes[j].Name, "route"+strconv.Itoa(j))
	}
	if s.Ordering == nil {
		s.Ordering = ptr(true)
	}
	if s.InstallTrigger == nil {
		s.InstallTrigger = ptr(true)
	}
	if s.ManageTable == nil {
		s.ManageTable = ptr(s.Preset == ManagedTablePreset && s.Discover == nil)
	}
	d.dur(&s.ClaimTimeout, p+".claim_timeout", DefaultClaimTimeout)
	d.dur(&s.Readiness.MaxOldestPending, p+".readiness.max_oldest_pending", DefaultMaxOldestPending)
	d.dur(&s.Readiness.MaxClaimFailure, p+".readiness.max_claim_failure", DefaultMaxClaimFailure)
	d.retention(&s.Retention, p+".retention")
	if s.Discover != nil {
		disc := *s.Discover // copy: the caller may share the pointer
		if len(disc.Tables) == 0 {
			disc.Tables = DefaultDiscoverTables()
		}
		d.dur(&disc.Interval, p+".discover.interval", DefaultDiscoverInterval)
		s.Discover = &disc
	}
}

// defaulter sets fields that are unset.
type defaulter struct {
	explicit func(path string) bool
}

func (d defaulter) set(path string) bool { return d.explicit != nil && d.explicit(path) }

func (d defaulter) str(p *string, v string) {
	if *p == "" {
		*p = v
	}
}

func (d defaulter) int(p *int, path string, v int) {
	if *p == 0 && !d.set(path) {
		*p = v
	}
}

func (d defaulter) dur(p *Duration, path string, v time.Duration) {
	if *p == 0 && !d.set(path) {
		*p = Duration(v)
	}
}

func ptr[T any](v T) *T { return &v }
