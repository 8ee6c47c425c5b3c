package source

import "time"

// FailedEvent is one row of a relay's dead-letter table (failed_events).
type FailedEvent struct {
	ID              string
	OriginalEventID string
	Source          string
	SourceSchema    string
	SourceTable     string
	EventType       string
	Topic           string
	Reason          string
	FailureCount    int
	FirstFailedAt   time.Time
	LastFailedAt    time.Time
	ReplayedAt      *time.Time
	ReplayCount     int
	Payload         []byte // the JSON payload, or the raw bytes
}

// DLQFilter selects dead letters. Empty fields match everything; replayed
// entries are left out unless IncludeReplayed.
type DLQFilter struct {
	IDs             []string // failed_events ids
	EventIDs        []string // original event ids
	Source          string
	EventType       string
	Since           time.Time
	IncludeReplayed bool
	// Reason selects the dead letters whose failure reason contains it,
	// in any case.
	Reason string
	// Newest orders the newest failure first; else the oldest dead letter
	// comes first.
	Newest bool
	Limit  int
}

// MigrationStatus is one of the relay's schema migrations.
type MigrationStatus struct {
	Version int64
	Name    string
	Applied bool
}
