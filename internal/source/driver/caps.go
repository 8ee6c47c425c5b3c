package driver

import (
	"context"
	"log/slog"
	"regexp"
	"time"

	"github.com/outbox-relay/outbox-relay/internal/layout"
	"github.com/outbox-relay/outbox-relay/internal/lease"
	"github.com/outbox-relay/outbox-relay/internal/source"
)

// Capabilities of a Driver.

// Enumerator is a Driver that can name the databases of a server, for the
// entries that stand for many databases (databases.<name>.dsns and
// .discover).
type Enumerator interface {
	// DatabaseName is the name of the database dsn connects to.
	DatabaseName(dsn string) (string, error)
	// WithDatabase is dsn connecting to database name instead, on the same
	// server with the same settings.
	WithDatabase(dsn, name string) (string, error)
	// ListDatabases lists the databases of p.DSN's server that a relay may
	// serve: what p.Query returns, or every database but those of the
	// server itself (templates, system schemas) and the relay's own.
	ListDatabases(ctx context.Context, p ListParams) ([]string, error)
}

// ListParams are what ListDatabases needs.
type ListParams struct {
	// DSN is where the list is read: on PostgreSQL the database whose
	// catalogue (pg_database) is read, on MySQL the server.
	DSN string
	// Query, when set, returns the names in its first column.
	Query string
	// RelaySchema is the relay's schema: on MySQL a database of the
	// server, which is never listed.
	RelaySchema string
}

// Capabilities of a DB.

// Leaser is a DB with a lease table: the shards of this process's owner.
type Leaser interface {
	Leases() *lease.Leases
}

// Discoverer is a DB that can find outbox tables by schema pattern
// (sources[].discover): the tables named one of names in every schema re
// matches.
type Discoverer interface {
	Discover(ctx context.Context, re *regexp.Regexp, names []string) ([]TableName, error)
}

// Notifier is a DB that can wake the relay when rows arrive (PostgreSQL's
// LISTEN/NOTIFY): Listener returns a listener on channel, not yet running.
type Notifier interface {
	Listener(channel string, log *slog.Logger) Listener
}

// Listener waits for notifications on one channel until its Run returns.
type Listener interface {
	Run(ctx context.Context) error
	// SubscribeAll wakes on every notification of the channel.
	SubscribeAll() <-chan struct{}
	// Subscribe wakes on the notifications about table t.
	Subscribe(t TableName) <-chan struct{}
	// SubscribeLeases wakes when a lease is handed over or a replica
	// leaves (on the relay schema's channel).
	SubscribeLeases() <-chan struct{}
}

// DeadLetters is a DB whose relay schema keeps dead letters.
type DeadLetters interface {
	ListFailed(ctx context.Context, f source.DLQFilter) ([]source.FailedEvent, error)
	// PurgeDead deletes the dead letters with these ids (not replayed),
	// audited under actor, and returns how many.
	PurgeDead(ctx context.Context, ids []string, actor string) (int, error)
}

// StatusReader is a DB that can read every source's state as the relays
// recorded it (relay_state and leases).
type StatusReader interface {
	Status(ctx context.Context) ([]source.Recorded, error)
	// Replicas lists the relay processes registered with a live
	// heartbeat, and the leases each holds.
	Replicas(ctx context.Context) ([]source.Replica, error)
}

// SampleKeeper is a DB that keeps the sources' chart samples in its relay
// schema: written by each source's holder, read by any replica.
type SampleKeeper interface {
	RecordSamples(ctx context.Context, xs []source.Sample) error
	Samples(ctx context.Context) ([]source.Sample, error)
}

// SchemaChecker is a DB that can say how its relay schema stands for the
// role the relay connects as: what it lacks to run, and whether it may
// apply pending migrations.
type SchemaChecker interface {
	CheckRelaySchema(ctx context.Context) ([]string, error)
	CanMigrate(ctx context.Context) (bool, error)
}

// Capabilities of a Table.

// Retainer is a Table whose settled rows can be deleted (retention) and
// whose space can be given back (optimize).
type Retainer interface {
	Purge(ctx context.Context, p PurgeParams) (source.PurgeResult, error)
	Optimize(ctx context.Context) (OptimizeReport, error)
}

// PurgeParams are a retention run over one source's table.
type PurgeParams struct {
	Source string
	Layout *layout.Layout
	source.PurgeOptions
}

// OptimizeReport is a table before and after Optimize.
type OptimizeReport struct {
	SizeBefore, SizeAfter int64
	DeadBefore, DeadAfter int64 // PostgreSQL's dead tuples
	Live                  int64
	Took                  time.Duration
	// Rebuilt is set for a table rebuilt (MySQL's OPTIMIZE TABLE), with
	// its unused space before and after instead of dead tuples.
	Rebuilt               bool
	FreeBefore, FreeAfter int64
}

// PrivilegeChecker is a Table that can compare the role's grants on it
// with need (and UPDATE on updateCols).
type PrivilegeChecker interface {
	CheckPrivileges(ctx context.Context, need []string, updateCols ...string) (Privileges, error)
}

// Privileges are the grants a role lacks on a table, and those it has
// beyond what it needs.
type Privileges struct {
	Missing, Extra []string
}

// Triggered is a Table that can carry the wake-up trigger, which notifies
// the relay's channel on insert.
type Triggered interface {
	HasTrigger(ctx context.Context) (bool, error)
	CanInstallTrigger(ctx context.Context) (bool, error)
	InstallTrigger(ctx context.Context) error
}

// Capabilities of a source.Store.

// Replayer is a store that can put dead letters back into its pending
// set, recording actor in the audit table.
type Replayer interface {
	Replay(ctx context.Context, events []source.FailedEvent, actor string) (int, error)
}

// Marker is a store that can record events delivered elsewhere (by a
// previous holder's Kafka transactions) as published.
type Marker interface {
	MarkPublished(ctx context.Context, ids []string) (int, error)
}

// Settler is a store that can wait, after a hand-over, until the previous
// owner's claims are over.
type Settler interface {
	Settle(ctx context.Context, n int, timeout time.Duration) error
}

// Waker is a store that learns of new rows itself (capture wal's stream):
// Wake signals that rows may be claimed, in place of the wake-up trigger.
type Waker interface {
	Wake() <-chan struct{}
}

// WALChecker is a store read from the write-ahead log (capture wal):
// CheckWAL says what the database lacks for it (problems) and how its
// replication slot stands (notes).
type WALChecker interface {
	CheckWAL(ctx context.Context) (problems, notes []string, err error)
}

// ClaimAdvisor is a store whose claims may cost more than their batch on
// this table for want of an index: ClaimAdvice says what to add, or "".
type ClaimAdvisor interface {
	ClaimAdvice() string
}

// Reaper is a dispatch queue's store: it puts back dispatches with no
// outcome, and tells how many are stuck and which keys a gap in their
// sequence holds.
type Reaper interface {
	Reap(ctx context.Context, timeout time.Duration) ([]Zombie, error)
	Stuck(ctx context.Context, after time.Duration) (int64, error)
	Gaps(ctx context.Context) ([]Gap, error)
}

// Zombie is a dispatch the reaper put back.
type Zombie struct {
	ID, Participant string
	Sequence        int64
}

// Gap is a participant held by a hole in its sequence: Last+1 .. Next-1
// are missing.
type Gap struct {
	Participant string
	Next, Last  int64
}
