// Package source defines the seam between the relay engine and the databases
// that hold outbox tables. A Store claims batches of pending rows for one
// source; each batch is held by its claimer until it completes (published
// rows acknowledged, failed rows scheduled for retry or dead-lettered, in one
// transaction) or is released untouched. A store may claim one bucket of
// its source only (Bucket: sources[].shards), the rows whose order key hashes
// to it.
//
// Implementations live in subpackages (postgres) and must pass the shared
// conformance suite in sourcetest.
package source

import (
	"context"
	"errors"
	"time"
)

// Row is one claimed outbox row, its route already rendered.
type Row struct {
	// ID is the row's id as text: the event's stable id.
	ID      string
	Payload []byte
	// Topic is the rendered destination; TopicOK is false when a column the
	// template needs is NULL.
	Topic   string
	TopicOK bool
	// Key and PartitionKey are nil when their template renders NULL.
	Key          []byte
	PartitionKey []byte
	// OrderKey groups rows whose relative order must hold.
	OrderKey      string
	Headers       []byte // a JSON object, or nil
	EventType     string
	AggregateType string
	AggregateID   string
	CreatedAt     time.Time // zero when the layout has no created column
	// Attempts is how many publish attempts already failed.
	Attempts int
	// Extra holds the layout's extra templates rendered for this row, in
	// order; nil where a column was NULL.
	Extra []*string
	// MaxAttempts is the row's own budget (max_retries + 1), 0 when the
	// layout has none and the source's budget applies.
	MaxAttempts int
}

// Retry schedules a failed row for another attempt.
type Retry struct {
	Index    int // into Batch.Rows
	Attempts int // failed attempts including this one
	At       time.Time
	Err      string
}

// Dead moves a row to the dead-letter table.
type Dead struct {
	Index    int
	Attempts int
	Reason   string
	// PayloadIsJSON and HeadersAreJSON say whether the payload and the
	// headers can be stored as JSON (else the payload is kept raw and the
	// headers only in the copy of the row).
	PayloadIsJSON  bool
	HeadersAreJSON bool
	// Exhausted is true when the retry budget is spent (else the failure
	// was terminal).
	Exhausted bool
}

// Outcome is what happened to each row of a batch. Rows in none of the lists
// are left pending untouched (deferred behind an earlier row of their key).
type Outcome struct {
	Published []int
	Retry     []Retry
	Dead      []Dead
	// Receipts, when the store asked for them (see ReceiptTaker), has one
	// entry per row: what the destination answered.
	Receipts []Receipt
}

// Receipt is what a destination answered to one row's dispatch: its
// reference for it and its code (an HTTP status, a code in the body), and
// how long the dispatch took. Empty fields are unknown.
type Receipt struct {
	Reference, Code string
	Latency         time.Duration
}

// ErrAlreadySettled is returned by Batch.Complete when some rows already
// had an outcome recorded by someone else (a queue's reaper took their
// attempt for abandoned and put them back); the others' outcomes are
// recorded.
var ErrAlreadySettled = errors.New("the attempt already has an outcome")

// ErrPositionMoved is returned by Batch.Complete of a store that reads its
// source from a recorded position (capture cursor) when the position is no
// longer the one the batch was claimed from: another claimer recorded a
// batch from it, or a batch claimed before this one was not completed.
// Nothing is recorded, and the batch's rows are claimed again.
var ErrPositionMoved = errors.New("the source's position moved since the claim")

// ReceiptTaker is a Store that records what the destination answered to
// each row (Outcome.Receipts).
type ReceiptTaker interface {
	TakesReceipts() bool
}

// Batch is a set of claimed rows held by one claimer.
type Batch interface {
	Rows() []Row
	// Complete records the outcome and releases the claim atomically.
	Complete(ctx context.Context, o Outcome) error
	// Release gives every row back untouched.
	Release(ctx context.Context) error
}

// Backlog describes the pending rows of a source.
type Backlog struct {
	Pending   int64
	OldestAge time.Duration
}

// Stats are counters a relay adds to the source's relay_state row.
type Stats struct {
	Published, Retried, DeadLettered int64
	LastPublishedID                  string
	// Live, when set, is what the source looks like now.
	Live *Live
}

// Live is what `outbox-relay status` shows of a running source: the process
// relaying it, its latest successful claim (zero: none yet), its deliveries
// a second over the last minute, and each sink's state.
type Live struct {
	Owner     string
	LastClaim time.Time
	Rate      float64
	Sinks     map[string]string
}

// Gauges describe a source now: what is pending, and its dead letters not
// yet replayed.
type Gauges struct {
	Backlog     Backlog
	DeadLetters int64
	// Slot is the source's replication slot, for a store that streams
	// from one (capture wal) once it exists; nil otherwise.
	Slot *SlotGauges
}

// SlotGauges measure a replication slot in bytes of WAL: what it keeps on
// the server (from its restart position) and what was written since its
// confirmed position.
type SlotGauges struct {
	RetainedBytes, LagBytes int64
}

// Store claims and completes batches of one source.
type Store interface {
	// Claim takes up to limit pending, due rows in order, skipping rows
	// another claimer holds. It returns nil (and no error) when none are due.
	Claim(ctx context.Context, limit int) (Batch, error)
	// RecordStats adds s to the relay_state row, sets its last poll time
	// and backlog, and returns the source's gauges, in one statement.
	RecordStats(ctx context.Context, s Stats) (Gauges, error)
}
