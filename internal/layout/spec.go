package layout

// This file is the layout as a configuration writes it (sources[].layout):
// plain data, merged with a preset by Merge and checked against the table by
// Resolve.

// Spec maps an outbox table's columns to an event. Column fields name a
// column; template fields mix literal text with {column} references, e.g.
// "tenant:{tenantId}". Empty fields keep the preset's value.
type Spec struct {
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
	XIDColumn     string            `yaml:"xid_column"`     // column of type xid8 filled with pg_current_xact_id(): polling claims rows in commit order; capture cursor (which needs it) reads by it
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
	Queue QueueSpec `yaml:"queue"`
}

// QueueSpec is mode queue: the table is a hot queue whose rows are deleted when
// claimed, each claim and each outcome appended to an archive table
// (Attempts) in the same transaction; a retry puts the row back. Rows of a
// participant are dispatched one at a time in sequence order. Columns of the
// archive named like a column of the table hold its copy.
type QueueSpec struct {
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
