package config

import (
	"fmt"
	"net"
	"regexp"
	"slices"
	"strings"
	"time"

	"github.com/outbox-relay/outbox-relay/internal/layout"
)

// Allowed values of the enumerated fields.
var (
	logLevels      = []string{"debug", "info", "warn", "error"}
	logFormats     = []string{"json", "text"}
	dbDrivers      = []string{"postgres", "mysql"}
	compressions   = []string{"none", "gzip", "snappy", "lz4", "zstd"}
	saslMechanisms = []string{"PLAIN", "SCRAM-SHA-256", "SCRAM-SHA-512"}
	notifyModes    = []string{"auto", "on", "off"}
	payloadFormats = []string{"json", "raw"}
	stateModes     = []string{"flag", "timestamp", "status", "delete", "queue"}
)

// Limits checked by Validate.
const (
	MaxBatchSize   = 10000
	MaxPipeline    = 64
	MaxMaxAttempts = 1000
	// MaxPriorityClasses is the most classes an event priority lists
	// (source.MaxPriorityClasses).
	MaxPriorityClasses = 16
	// MaxLookahead is the most pending events a claim under an event
	// priority considers.
	MaxLookahead = 1_000_000
	// MaxShards is the most buckets a source is split into (source.MaxBuckets).
	MaxShards = 256
)

// namePattern is what source, database and sink names must match.
var namePattern = regexp.MustCompile(`^[a-zA-Z0-9_.-]{1,100}$`)

// Validate checks a configuration whose defaults are applied and returns a
// *ValidationError listing every problem, or nil.
func (c *Config) Validate() error {
	var ps problems
	if err := layout.CheckPlainIdent(c.RelaySchema); err != nil {
		ps.add("relay_schema", "%v", err)
	}
	oneOf(&ps, "log.level", c.Log.Level, logLevels, true)
	oneOf(&ps, "log.format", c.Log.Format, logFormats, true)
	if l := c.Admin.Listen; l != "off" {
		if _, _, err := net.SplitHostPort(l); err != nil {
			ps.add("admin.listen", "must be host:port, :port or \"off\", got %q", l)
		}
	}
	if c.Admin.Token != "" && c.Admin.TokenFile != "" {
		ps.add("admin.token_file", "set admin.token or admin.token_file, not both")
	}
	positive(&ps, "shutdown.timeout", c.Shutdown.Timeout)
	if c.LeaseTTL < Duration(time.Second) {
		ps.add("lease_ttl", "must be at least 1s, got %s", c.LeaseTTL)
	}

	for _, name := range sortedKeys(c.Databases) {
		c.validateDatabase(&ps, name)
	}
	for _, name := range sortedKeys(c.Sinks) {
		c.validateSink(&ps, name)
	}
	if len(c.Sources) == 0 {
		ps.add("sources", "at least one source is required")
	}
	seen := map[string]int{}
	for i := range c.Sources {
		c.validateSource(&ps, i, seen)
	}
	// Name the source of each problem: "sources[3]" alone sends the
	// reader counting list items.
	for k := range ps {
		for i, s := range c.Sources {
			p := SourcePath(i)
			if s.Name != "" && (ps[k].Path == p || strings.HasPrefix(ps[k].Path, p+".")) {
				ps[k].Source = s.Name
			}
		}
	}
	return ps.err()
}

func (c *Config) validateDatabase(ps *problems, name string) {
	db, p := c.Databases[name], "databases."+name
	checkName(ps, "databases", name)
	oneOf(ps, p+".driver", db.Driver, dbDrivers, true)
	switch {
	case len(db.DSNs) > 0 && db.DSN != "":
		ps.add(p+".dsns", "set dsn (one database, or the server discover looks on) or dsns (several databases), not both")
	case len(db.DSNs) > 0:
	case db.DSN == "" && db.Discover != nil:
		ps.add(p+".dsn", "required with discover: the server whose databases it finds (or set %s)", DatabaseDSNEnv(name))
	case db.DSN == "":
		ps.add(p+".dsn", "required (or set %s)", DatabaseDSNEnv(name))
	}
	seen := map[string]int{}
	for i, dsn := range db.DSNs {
		ip := fmt.Sprintf("%s.dsns[%d]", p, i)
		if j, dup := seen[dsn]; dup {
			ps.add(ip, "the same as dsns[%d]", j)
		} else if strings.TrimSpace(dsn) == "" {
			ps.add(ip, "must not be empty")
		}
		seen[dsn] = i
	}
	if d := db.Discover; d != nil {
		if len(db.DSNs) > 0 {
			ps.add(p+".discover", "not with dsns: discover finds the databases on the server dsn names")
		}
		validateDatabaseDiscover(ps, p+".discover", d)
	}
	if db.MaxConns < 1 {
		ps.add(p+".max_conns", "must be at least 1, got %d", db.MaxConns)
	}
}

// validateDatabaseDiscover checks a rule that discovers databases.
func validateDatabaseDiscover(ps *problems, p string, d *DatabaseDiscover) {
	switch {
	case d.Pattern == "" && strings.TrimSpace(d.Query) == "":
		ps.add(p, "set pattern (a glob on database names, or regex:...) or query (a SELECT returning their names)")
	case d.Pattern != "" && d.Query != "":
		ps.add(p, "set pattern or query, not both")
	case d.Pattern != "":
		if _, err := d.Matcher(); err != nil {
			ps.add(p+".pattern", "%v", err)
		}
	}
	positive(ps, p+".interval", d.Interval)
}

func (c *Config) validateSink(ps *problems, name string) {
	s, p := c.Sinks[name], "sinks."+name
	checkName(ps, "sinks", name)
	oneOf(ps, p+".type", s.Type, sinkTypes(), true)
	c.validateSinkBlocks(ps, p, &s)
	positive(ps, p+".timeout", s.Timeout)
	if s.BatchWait < 0 {
		ps.add(p+".batch_wait", "must not be negative, got %s", s.BatchWait)
	}
	if s.Circuit.Failures < 1 {
		ps.add(p+".circuit.failures", "must be at least 1, got %d", s.Circuit.Failures)
	}
	positive(ps, p+".circuit.cooldown", s.Circuit.Cooldown)
	if s.Circuit.MaxCooldown < s.Circuit.Cooldown {
		ps.add(p+".circuit.max_cooldown", "must be at least circuit.cooldown (%s), got %s", s.Circuit.Cooldown, s.Circuit.MaxCooldown)
	}
	if s.Type != "kafka" {
		return // its own block was checked, or the type is unknown
	}
	if len(s.Brokers) == 0 {
		ps.add(p+".brokers", "required (or set %s)", SinkBrokersEnv(name))
	}
	for i, b := range s.Brokers {
		if b == "" || strings.ContainsFunc(b, isSpace) {
			ps.add(fmt.Sprintf("%s.brokers[%d]", p, i), "must be host:port, got %q", b)
		}
	}
	if s.ClientID == "" {
		ps.add(p+".client_id", "required")
	}
	if s.MaxMessageBytes < 1 {
		ps.add(p+".max_message_bytes", "must be at least 1, got %d", s.MaxMessageBytes)
	}
	positive(ps, p+".delivery_timeout", s.DeliveryTimeout)
	if s.RecordRetries < 0 {
		ps.add(p+".record_retries", "must not be negative, got %d", s.RecordRetries)
	}
	if s.Linger < 0 {
		ps.add(p+".linger", "must not be negative, got %s", s.Linger)
	}
	oneOf(ps, p+".compression", s.Compression, compressions, true)
	oneOf(ps, p+".partitioner", s.Partitioner, []string{"murmur2", "sarama"}, false)
	if a := s.SASL; a != nil {
		oneOf(ps, p+".sasl.mechanism", a.Mechanism, saslMechanisms, true)
		if a.Username == "" {
			ps.add(p+".sasl.username", "required")
		}
		if a.Password == "" {
			ps.add(p+".sasl.password", "required (or set %s)", SinkSASLPasswordEnv(name))
		}
	}
	if t := s.TLS; t != nil && (t.CertFile == "") != (t.KeyFile == "") {
		ps.add(p+".tls", "set both cert_file and key_file, or neither")
	}
}

func (c *Config) validateSource(ps *problems, i int, seen map[string]int) {
	s, p := &c.Sources[i], fmt.Sprintf("sources[%d]", i)
	switch {
	case s.Name == "":
		ps.add(p+".name", "required")
	case !namePattern.MatchString(s.Name):
		ps.add(p+".name", "must match %s, got %q", namePattern, s.Name)
	default:
		if j, dup := seen[s.Name]; dup {
			ps.add(p+".name", "duplicate name %q (also sources[%d])", s.Name, j)
		} else {
			seen[s.Name] = i
		}
	}
	reference(ps, p+".database", "database", s.Database, sortedKeys(c.Databases))
	reference(ps, p+".sink", "sink", s.Sink, sortedKeys(c.Sinks))

	if (s.Table == "") == (s.Discover == nil) {
		ps.add(p, "set exactly one of table and discover")
	}
	if s.Table != "" {
		if db, ok := c.Databases[s.Database]; ok && !db.Multi() && strings.Contains(s.Table, DatabasePlaceholder) {
			ps.add(p+".table", "%s stands for each database of an entry with dsns or discover; %s is one database", DatabasePlaceholder, s.Database)
		} else if _, _, err := layout.ParseTableName(TableOn(s.Table, "database")); err != nil {
			ps.add(p+".table", "%v", err)
		}
	}
	if d := s.Discover; d != nil {
		validateDiscover(ps, p+".discover", d)
	}
	validateLayout(ps, p+".layout", &s.Layout)
	checkTemplate(ps, p+".topic", s.Topic)
	for j := range s.Routes {
		c.validateRoute(ps, fmt.Sprintf("%s.routes[%d]", p, j), &s.Routes[j])
	}

	between(ps, p+".batch_size", s.BatchSize, 1, MaxBatchSize)
	between(ps, p+".pipeline", s.Pipeline, 1, MaxPipeline)
	between(ps, p+".shards", s.Shards, 1, MaxShards)
	if s.Shards > 1 && s.IsQueue() {
		ps.add(p+".shards", "a queue (state mode queue) dispatches one event per participant at a time from one worker; it is not split, got %d", s.Shards)
	}
	if s.EventPriority != nil {
		validateEventPriority(ps, p, s)
	}
	between(ps, p+".max_attempts", s.MaxAttempts, 1, MaxMaxAttempts)
	ordered(ps, p+".backoff", "initial", "max", s.Backoff.Initial, s.Backoff.Max)
	ordered(ps, p+".poll", "min", "max", s.Poll.Min, s.Poll.Max)
	positive(ps, p+".poll.fallback", s.Poll.Fallback)
	if s.MaxInFlight < 0 {
		ps.add(p+".max_in_flight", "must not be negative, got %d", s.MaxInFlight)
	}
	if s.Poll.Debounce < 0 || s.Poll.Debounce > Duration(time.Second) {
		ps.add(p+".poll.debounce", "must be between 0 and 1s, got %s", s.Poll.Debounce)
	}
	if s.IsQueue() {
		positive(ps, p+".reaper.timeout", s.Reaper.Timeout)
		positive(ps, p+".reaper.interval", s.Reaper.Interval)
		if s.Discover != nil {
			ps.add(p+".discover", "a queue (state mode queue) is listed by its table, not discovered")
		}
		if s.Retention != nil {
			ps.add(p+".retention", "a queue's table holds only pending rows, and its archive is the application's record: nothing to purge")
		}
		// A dispatch still waiting for its answer must not look abandoned.
		names := []string{s.Sink}
		for _, r := range s.Routes {
			names = append(names, r.Sink)
		}
		for _, n := range names {
			if sk, ok := c.Sinks[n]; ok && sk.Timeout >= s.Reaper.Timeout && s.Reaper.Timeout > 0 {
				ps.add(p+".reaper.timeout", "must exceed sinks.%s.timeout (%s): a dispatch still waiting for its answer would be put back as a zombie, got %s",
					n, sk.Timeout, s.Reaper.Timeout)
			}
		}
	} else if s.Reaper != (Reaper{}) {
		ps.add(p+".reaper", "only a queue (state mode queue) has dispatches to reap")
	}
	oneOf(ps, p+".notify", s.Notify, notifyModes, true)
	positive(ps, p+".readiness.max_oldest_pending", s.Readiness.MaxOldestPending)
	positive(ps, p+".readiness.max_claim_failure", s.Readiness.MaxClaimFailure)
	if s.ClaimTimeout < Duration(time.Second) {
		ps.add(p+".claim_timeout", "must be at least 1s, got %s", s.ClaimTimeout)
	}
	validateManageTable(ps, p, s)
	c.validateCapture(ps, p, s)
	c.validateDelivery(ps, p, s)
	c.validateRetention(ps, p+".retention", s)
}

// validateManageTable checks that a managed table is one the relay knows how
// to create, named plainly (its version table is named after it).
func validateManageTable(ps *problems, p string, s *Source) {
	if s.ManageTable == nil || !*s.ManageTable {
		return
	}
	if s.Preset != ManagedTablePreset && s.Preset != QueuePreset {
		ps.add(p+".manage_table", "only presets %s and %s have tables the relay manages, got preset %q", ManagedTablePreset, QueuePreset, s.Preset)
		return
	}
	if s.Table == "" {
		ps.add(p+".manage_table", "needs table (a discovered table is not managed)")
		return
	}
	schema, table, err := layout.ParseTableName(TableOn(s.Table, "database"))
	if err != nil {
		return // reported on .table
	}
	for _, id := range []string{schema, table} {
		if err := layout.CheckPlainIdent(id); err != nil {
			ps.add(p+".table", "a managed table %v", err)
			return
		}
	}
	if s.Preset == QueuePreset && table != QueueTable {
		ps.add(p+".table", "preset %s manages the tables of its own shape: the table must be %s, got %q", QueuePreset, QueueTable, table)
	}
}

// QueueTable is the hot table preset payment-queue creates.
const QueueTable = "payment_outbox_pending"

func (c *Config) validateRoute(ps *problems, p string, r *Route) {
	if r.Name != "" && !namePattern.MatchString(r.Name) {
		ps.add(p+".name", "must match %s, got %q", namePattern, r.Name)
	}
	if r.MaxInFlight < 0 {
		ps.add(p+".max_in_flight", "must not be negative, got %d", r.MaxInFlight)
	}
	if r.Sink == "" {
		ps.add(p+".sink", "required (one of: %s)", strings.Join(sortedKeys(c.Sinks), ", "))
	} else {
		reference(ps, p+".sink", "sink", r.Sink, sortedKeys(c.Sinks))
	}
	if len(r.EventTypes) == 0 && len(r.AggregateTypes) == 0 && r.Column == "" {
		ps.add(p, "give at least one condition: event_types, aggregate_types or column with values")
	}
	if (r.Column == "") != (len(r.Values) == 0) {
		ps.add(p+".values", "column and values go together")
	}
	checkTemplate(ps, p+".topic", r.Topic)
}

func validateDiscover(ps *problems, p string, d *Discover) {
	if d.Schemas == "" {
		ps.add(p+".schemas", "required (a regular expression on schema names)")
	} else if _, err := regexp.Compile(d.Schemas); err != nil {
		ps.add(p+".schemas", "invalid regular expression: %v", err)
	}
	if len(d.Tables) == 0 {
		ps.add(p+".tables", "required")
	}
	for i, t := range d.Tables {
		if id, rest, err := layout.ParseIdent(t); err != nil {
			ps.add(fmt.Sprintf("%s.tables[%d]", p, i), "invalid table name %q: %v", t, err)
		} else if rest != "" {
			ps.add(fmt.Sprintf("%s.tables[%d]", p, i), "invalid table name %q: unexpected %q after %q (give the table name alone)", t, rest, id)
		}
	}
	positive(ps, p+".interval", d.Interval)
}

func validateLayout(ps *problems, p string, l *layout.Spec) {
	oneOf(ps, p+".payload_format", l.PayloadFormat, payloadFormats, false)
	oneOf(ps, p+".state.mode", l.State.Mode, stateModes, false)
	checkTemplate(ps, p+".topic", l.Topic)
	checkTemplate(ps, p+".key", l.Key)
	checkTemplate(ps, p+".partition_key", l.PartitionKey)
	checkTemplate(ps, p+".order_key", l.OrderKey)
	for _, name := range sortedKeys(l.ExtraHeaders) {
		hp := p + ".extra_headers." + name
		if strings.TrimSpace(name) == "" || strings.ContainsAny(name, "\r\n") {
			ps.add(hp, "a header name must be a non-empty line")
		}
		if l.ExtraHeaders[name] == "" {
			ps.add(hp, "needs a template, e.g. \"{column}\"")
		}
		checkTemplate(ps, hp, l.ExtraHeaders[name])
	}
	if l.State.Errored != "" && l.State.Mode == "delete" {
		ps.add(p+".state.errored", "not used with mode delete (a dead-lettered row is deleted)")
	}
	if (l.State.BatchID == "") != (l.State.ClaimedAt == "") {
		ps.add(p+".state", "set both batch_id and claimed_at, or neither")
	}
}

// checkTemplate reports a template field that does not parse.
func checkTemplate(ps *problems, path, s string) {
	if _, err := layout.ParseTemplate(s); err != nil {
		ps.add(path, "%v", err)
	}
}

// reference checks that a source names an existing database or sink.
func reference(ps *problems, path, kind, name string, have []string) {
	switch {
	case name == "" && len(have) == 0:
		ps.add(path, "required, and no %ss are configured", kind)
	case name == "":
		ps.add(path, "required when more than one %s is configured (have: %s)", kind, strings.Join(have, ", "))
	case !slices.Contains(have, name):
		list := strings.Join(have, ", ")
		if list == "" {
			list = "none"
		}
		ps.add(path, "unknown %s %q (have: %s)", kind, name, list)
	}
}

// checkName reports a database or sink name that namePattern rejects.
func checkName(ps *problems, path, name string) {
	if !namePattern.MatchString(name) {
		ps.add(path, "invalid name %q: must match %s", name, namePattern)
	}
}

// oneOf reports a value outside allowed; an empty value is reported only
// when required.
func oneOf(ps *problems, path, v string, allowed []string, required bool) {
	switch {
	case v == "" && !required:
	case v == "":
		ps.add(path, "required (one of: %s)", strings.Join(allowed, ", "))
	case !slices.Contains(allowed, v):
		ps.add(path, "must be one of %s, got %q", strings.Join(allowed, ", "), v)
	}
}

func between(ps *problems, path string, v, lo, hi int) {
	if v < lo || v > hi {
		ps.add(path, "must be between %d and %d, got %d", lo, hi, v)
	}
}

func positive(ps *problems, path string, d Duration) {
	if d <= 0 {
		ps.add(path, "must be positive, got %s", d)
	}
}

// ordered checks that lo and hi are positive and lo <= hi.
func ordered(ps *problems, p, loName, hiName string, lo, hi Duration) {
	positive(ps, p+"."+loName, lo)
	positive(ps, p+"."+hiName, hi)
	if lo > 0 && hi > 0 && lo > hi {
		group := p[strings.LastIndexByte(p, '.')+1:]
		ps.add(p+"."+loName, "must not exceed %s.%s (%s), got %s", group, hiName, hi, lo)
	}
}

func isSpace(r rune) bool { return r == ' ' || r == '\t' || r == '\n' || r == '\r' }

// validateDelivery checks that exactly-once delivery has what it needs: a
// Kafka sink for the source and every route (the same one: one
// transaction), and not a queue.
func (c *Config) validateDelivery(ps *problems, p string, s *Source) {
	oneOf(ps, p+".delivery", s.Delivery, []string{DeliveryAtLeastOnce, DeliveryExactlyOnce}, true)
	if s.Delivery == DeliveryExactlyOnce && s.Shards > 1 {
		ps.add(p+".shards", "not with delivery exactly_once (one transactional producer serves the whole source), got %d", s.Shards)
	}
	if s.Delivery != DeliveryExactlyOnce {
		return
	}
	if sk, ok := c.Sinks[s.Sink]; ok && sk.Type != "kafka" {
		ps.add(p+".delivery", "exactly_once needs a Kafka sink (Kafka transactions); sink %s is %s", s.Sink, sk.Type)
	}
	for j, r := range s.Routes {
		if r.Sink != s.Sink {
			ps.add(fmt.Sprintf("%s.routes[%d].sink", p, j), "with delivery exactly_once every route goes to the source's sink %s (one transaction), got %s", s.Sink, r.Sink)
		}
		if r.MaxInFlight > 0 {
			ps.add(fmt.Sprintf("%s.routes[%d].max_in_flight", p, j), "not with delivery exactly_once (a batch is one transaction)")
		}
	}
	if s.IsQueue() {
		ps.add(p+".delivery", "a queue dispatches one event per participant at a time; exactly_once applies to outbox tables")
	}
	if s.MaxInFlight > 0 {
		ps.add(p+".max_in_flight", "not with delivery exactly_once (a batch is one transaction)")
	}
}

// validateEventPriority checks sources[i].event_priority (p is sources[i]).
func validateEventPriority(ps *problems, p string, s *Source) {
	e := s.EventPriority
	p += ".event_priority"
	if s.IsQueue() {
		ps.add(p, "a queue (state mode queue) dispatches each participant's events in sequence, due first; it has no priority between events")
	}
	if s.Shards > 1 && (s.Ordering == nil || *s.Ordering) {
		ps.add(p, "not with shards (%d) and ordering: a bucket's claim does not rank its rows", s.Shards)
	}
	if len(e.Classes) == 0 || len(e.Classes) > MaxPriorityClasses {
		ps.add(p+".classes", "want 1 to %d patterns, got %d", MaxPriorityClasses, len(e.Classes))
	}
	for j, c := range e.Classes {
		if strings.Trim(c, "*") == "" {
			ps.add(fmt.Sprintf("%s.classes[%d]", p, j), "%q matches every event: list the urgent ones", c)
		}
	}
	between(ps, p+".lookahead", e.Lookahead, 1, MaxLookahead)
}
