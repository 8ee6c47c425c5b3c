package source

import "time"

// PurgeOptions say which settled rows a retention run deletes and how fast;
// each store's Purge takes them with its table.
type PurgeOptions struct {
	// OlderThan is the age a settled row must have, by its published-at
	// column, else its created-at column.
	OlderThan time.Duration
	// IncludeDead deletes dead-lettered rows too (failed_events keeps a
	// copy of each, and a replay restores it from there).
	IncludeDead bool
	// DryRun counts what would be deleted and deletes nothing.
	DryRun bool
	// BatchSize bounds the rows one batch deletes; each batch is its own
	// transaction. Zero takes the store's default.
	BatchSize int
	// Pause is slept between batches, to leave the database to others.
	Pause time.Duration
	// LockTimeout bounds how long a batch waits for a lock; a batch that
	// gives up is tried again after the pause. Zero takes the store's
	// default.
	LockTimeout time.Duration
	// StatementTimeout bounds one batch; zero takes the store's default.
	StatementTimeout time.Duration
}

// PurgeResult counts what a retention run deleted, or with DryRun would
// delete.
type PurgeResult struct {
	Published    int64 // delivered outbox rows
	Dead         int64 // dead-lettered outbox rows (IncludeDead)
	FailedEvents int64 // dead letters replayed before the cutoff
	Audit        int64 // audit rows of those dead letters
	RetryState   int64 // retry state of events no longer in the table
	// Batches is the number of batches that deleted from the outbox table.
	Batches int
	// KeptByLayout is set when the layout deletes rows itself (mode
	// delete) or the relay never writes to the table (capture cursor):
	// the outbox table was left alone.
	KeptByLayout bool
}
