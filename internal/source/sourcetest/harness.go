// Package sourcetest is the conformance suite every source.Store
// implementation passes against its real database. An implementation's
// tests call Run with a Harness: the harness knows the SQL dialect (how to
// create a table, insert a row, read its state, cut a connection), the suite
// knows what a Store must do, and checks it for each layout preset the
// harness supports.
//
// What the suite proves, per preset:
//
//   - claims return pending rows in the layout's order_by order, at most the
//     limit, rendered (topic, key, partition key, headers, payload);
//   - concurrent claimers never get the same row, and a held batch's rows
//     are invisible to other claimers until it is released or completed;
//   - Release gives rows back untouched;
//   - Complete is atomic: published rows leave the pending set (deleted or
//     marked), retried rows are not claimable before their time and are
//     after it, with their attempts carried (in the database: a new Store
//     sees them), dead rows are in the dead-letter table with their reason
//     and, per layout, marked failed; rows in no list stay pending;
//   - with ordering on, a key with a row in backoff has none of its later
//     rows claimed while other keys flow; with ordering off they flow;
//   - the stores of the buckets of a source (sources[].shards) claim
//     disjoint sets of rows whose union is every row, each row in the
//     bucket Go's source.BucketOf computes; a store of a bucket of one
//     shard count claiming beside a store of another that holds a batch
//     never claims a row of a key whose earlier row the other holds;
//   - RecordStats adds to the source's counters and returns the backlog
//     and dead-letter gauges;
//   - a claim whose connection dies is taken back, and so is a claim left
//     idle longer than the claim timeout; a row another relay marked
//     claimed (layouts with state.batch_id) is taken back once that claim
//     is older than the claim timeout, and an acknowledged row records
//     the batch's id and claim time;
//   - privileges as `outbox-relay check` reports them: a role granted
//     exactly what the layout and the relay's tables need lacks nothing,
//     and one without UPDATE on the outbox table or DELETE on
//     failed_events is told so by name (for a Table that is a RoleTable:
//     a capability a harness may lack);
//   - the dead-letter list selects by source, ids, event ids, event type,
//     time, reason (in any case) and replay, oldest or newest first, within
//     a limit; a replay puts the row back in the pending set (restoring it
//     where the layout deleted it), marks the dead letter replayed and
//     audits it, and refuses another source's dead letters; the
//     dead-letter purge deletes only dead letters not replayed, audited;
//   - retention deletes delivered rows older than the cutoff, dead rows
//     only when asked, never pending, claimed or backing-off rows, and
//     prunes dead letters replayed before the cutoff with their audit
//     rows and the retry state of rows no longer in the table; a dry run counts the same and deletes nothing; a layout that
//     deletes its rows is left alone; a row another transaction holds is
//     skipped, not waited for; a batch that gives up on a table lock is
//     tried again, and the run fails after a few tries.
//
// A store that differs by design (a claim that commits at once, one row of
// a key at a time, a reaper) declares it as Capabilities (see caps.go).
//
// The suite uses short real backoffs (about a second) rather than fake
// clocks, and the database's own clock decides when a retry is due.
package sourcetest

import (
	"context"
	"testing"
	"time"

	"github.com/outbox-relay/outbox-relay/internal/source"
)

// Harness gives the suite fresh outbox tables on a real database. It must be
// safe for use by parallel tests.
type Harness interface {
	// Presets lists the layout presets (internal/layout) the suite runs
	// for. Each must be one the implementation supports.
	Presets() []string
	// NewTable creates a fresh, empty outbox table shaped for preset,
	// with every column the preset names (optional ones included), and
	// whatever the relay's own tables need (relay state, dead letters,
	// retry state). The table is dropped, or left to a dropped database,
	// when t ends. Tables of different calls must not see each other's
	// rows, dead letters or counters.
	NewTable(t *testing.T, preset string) Table
}

// Table is one outbox table made by a Harness.
type Table interface {
	// Open builds a new Store on the table with its own database
	// connections (so that Kill cuts only them). Each call is a new
	// instance sharing nothing with earlier ones but the database: state
	// the suite expects to survive a restart must live there.
	Open(t *testing.T, o Options) Store
	// Insert adds rows one after the other and returns their ids as the
	// store reports them (source.Row.ID). Every row must sort after the
	// rows inserted before it by the layout's order_by (a created_at
	// column needs a clock that moves between rows, such as
	// clock_timestamp() on PostgreSQL or DATETIME(6) with NOW(6) on
	// MySQL). Empty Key, PartitionKey and Headers mean none, stored as
	// the table stores "none" (NULL or '').
	Insert(t *testing.T, rows ...Row) []string
	// State reads the row with id as the layout records it.
	State(t *testing.T, id string) RowState
	// DeadLetters lists the dead-letter entries of the row with id.
	DeadLetters(t *testing.T, id string) []DeadLetter
	// Totals reads the counters the relay state keeps for the source
	// named src (see Options.Source). Zero values when it has no row.
	Totals(t *testing.T, src string) source.Stats
	// ClaimElsewhere marks the row claimed by another relay at the given
	// time, as the original kafka_outbox relay does: a batch id and the
	// claim time, not yet delivered. Only called for presets whose layout
	// has state.batch_id.
	ClaimElsewhere(t *testing.T, id string, at time.Time)
}

// Options configure a Store opened by Table.Open.
type Options struct {
	// Source is the source's name: the key of its relay state, dead
	// letters and retry state. The suite makes it unique per table.
	Source string
	// Ordering turns per-key order on.
	Ordering bool
	// ClaimTimeout is the store's claim timeout (config
	// sources[].claim_timeout); zero means the default. A claim left
	// idle longer must be ended by the database, and another relay's
	// unfinished claim older than this is taken back.
	ClaimTimeout time.Duration
	// Bucket is the part of the source the store claims (sources[].shards);
	// the zero value is the whole source.
	Bucket source.Bucket
	// Priority, when set, has the store claim some rows first
	// (sources[].event_priority); its column is "topic", which every
	// layout the suite runs for has.
	Priority *source.Priority
}

// Store is a source.Store opened on a test table.
// RetainedTable is a Table whose dead letters and retention the suite can
// drive: the cases on dead letters and retention run on it; a store without
// them (the payment queue keeps its outcomes in its archive) skips them.
type RetainedTable interface {
	Table
	// ListFailed lists the dead letters f selects, as the store's
	// ListFailed does.
	ListFailed(t *testing.T, f source.DLQFilter) []source.FailedEvent
	// PurgeDead deletes dead letters by id, as the store's PurgeDead does,
	// and returns how many it deleted.
	PurgeDead(t *testing.T, ids []string, actor string) int
	// Purge runs the store's retention on the table for the source named
	// src.
	Purge(t *testing.T, src string, o source.PurgeOptions) (source.PurgeResult, error)
	// Audit lists the actions (replay, purge) the audit table records for
	// the dead letter with id, oldest first.
	Audit(t *testing.T, deadLetterID string) []string
	// Backdate moves the row's dates (created, published) back by d; a
	// layout without dates leaves it as it is.
	Backdate(t *testing.T, id string, d time.Duration)
	// DeleteRow deletes the row with id, as an application might.
	DeleteRow(t *testing.T, id string)
	// LockRow locks the row with id as an application's transaction
	// would (SELECT ... FOR UPDATE) until unlock is called.
	LockRow(t *testing.T, id string) (unlock func())
	// LockTable takes a lock on the table that keeps a retention batch
	// from deleting (a read lock, a share lock) until unlock is called.
	LockTable(t *testing.T) (unlock func())
	// BackdateReplay moves the replay time of the dead letter with id
	// back by d.
	BackdateReplay(t *testing.T, deadLetterID string, d time.Duration)
}

type Store interface {
	source.Store
	// Replay puts dead letters of the store's source back into the
	// pending set, audited.
	Replay(ctx context.Context, events []source.FailedEvent, actor string) (int, error)
	// Kill cuts every database connection of this store at once, as a
	// crash or a network failure would, without telling the store.
	Kill(t *testing.T)
}

// Row is an outbox row to insert.
type Row struct {
	Topic        string
	Key          string // "" for none
	PartitionKey string // "" for none (ignored when the layout has no partition key)
	Payload      string // JSON text
	Headers      string // a JSON object, "" for none (ignored when the layout has no headers)
}

// RowState is a row as the table records it.
type RowState struct {
	Exists bool
	// Pending is true while the row's state columns say it is still to
	// be delivered (not published, not dead-lettered), whatever its
	// backoff.
	Pending bool
	// Published is true once the row is marked delivered (flag,
	// published timestamp or status).
	Published bool
	// Failed is true once the row is marked dead (status failed, or the
	// errored flag).
	Failed bool
	// Attempts is the table's own retry counter (state retry_count),
	// 0 when the layout has none.
	Attempts int
	// Error is the table's error column, "" when the layout has none.
	Error string
	// BatchID and ClaimedAt are the claim columns (layouts with
	// state.batch_id): "" and zero when unset.
	BatchID   string
	ClaimedAt time.Time
}

// DeadLetter is one entry of the dead-letter table.
type DeadLetter struct {
	Reason   string
	Attempts int
}
