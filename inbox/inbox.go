// Package inbox is the consumer's half of exactly-once: it records each
// event id a consumer group processes in a table, in the same database
// transaction as the consumer's own work, so that a redelivered event (a
// retry, a rebalance, a replay) is acknowledged and skipped instead of
// processed twice.
//
// The table is processed_events (ProcessedEvents) as seed 001's teams
// wrote it (one consumer group per table: its key is the event id), or
// the package's own (Migrate), keyed by consumer group and event id. Expired ids are purged
// in batches by Purge (or `outbox-relay inbox purge`).
//
// It works with database/sql (PostgreSQL, MySQL, MariaDB) and pgx.
package inbox

import (
	"context"
	"database/sql"
	"errors"
	"fmt"
	"time"

	"github.com/jackc/pgx/v5"

	"github.com/outbox-relay/outbox-relay/internal/sqlident"
)

// Dialect is the database's SQL flavour.
type Dialect int

const (
	// Postgres is PostgreSQL.
	Postgres Dialect = iota
	// MySQL is MySQL or MariaDB.
	MySQL
)

// Table describes the processed-events table.
type Table struct {
	// Name is the table, optionally schema-qualified.
	Name string
	// EventID, Group and ExpiresAt are its columns.
	EventID, Group, ExpiresAt string
	// PerGroup says the table's key is (group, event id); without it the
	// key is the event id alone and the table serves one consumer group.
	PerGroup bool
}

// ProcessedEvents is the processed_events table teams write for the
// relay's status preset (seed 001): event_id UUID PRIMARY KEY,
// consumer_group, processed_at and expires_at (24 hours by default). It
// serves one consumer group.
var ProcessedEvents = Table{Name: "processed_events", EventID: "event_id", Group: "consumer_group", ExpiresAt: "expires_at"}

// Seed001 is ProcessedEvents.
//
// Deprecated: use ProcessedEvents.
var Seed001 = ProcessedEvents

// Own is the table Migrate creates: keyed by consumer group and event id.
var Own = Table{Name: "outbox_inbox", EventID: "event_id", Group: "consumer_group", ExpiresAt: "expires_at", PerGroup: true}

// Inbox records the events one consumer group processed.
type Inbox struct {
	table   Table
	dialect Dialect
	group   string
	ttl     time.Duration
	claim   string
}

// DefaultTTL is how long an id is kept: seed 001's 24 hour window.
const DefaultTTL = 24 * time.Hour

// New returns the inbox of consumer group in table, keeping ids for ttl
// (DefaultTTL when 0).
func New(dialect Dialect, table Table, group string, ttl time.Duration) *Inbox {
	if ttl <= 0 {
		ttl = DefaultTTL
	}
	i := &Inbox{table: table, dialect: dialect, group: group, ttl: ttl}
	cols := quote(dialect, table.EventID) + ", " + quote(dialect, table.Group) + ", " + quote(dialect, table.ExpiresAt)
	if dialect == MySQL {
		i.claim = "INSERT IGNORE INTO " + quoteName(dialect, table.Name) + " (" + cols + ") VALUES (?, ?, ?)"
	} else {
		i.claim = "INSERT INTO " + quoteName(dialect, table.Name) + " (" + cols + ") VALUES ($1, $2, $3) ON CONFLICT DO NOTHING"
	}
	return i
}

// ErrNoEventID says a message carries no event id.
var ErrNoEventID = errors.New("inbox: the message has no event id")

// Claim records eventID as processed by the group inside tx and reports
// whether this is its first time: false means a duplicate, to acknowledge
// without processing. The record commits or rolls back with tx.
func (i *Inbox) Claim(ctx context.Context, tx *sql.Tx, eventID string) (bool, error) {
	if eventID == "" {
		return false, ErrNoEventID
	}
	res, err := tx.ExecContext(ctx, i.claim, eventID, i.group, time.Now().Add(i.ttl).UTC())
	if err != nil {
		return false, fmt.Errorf("inbox: record event %s: %w", eventID, err)
	}
	n, err := res.RowsAffected()
	if err != nil {
		return false, fmt.Errorf("inbox: record event %s: %w", eventID, err)
	}
	return n == 1, nil
}

// ClaimPgx is Claim for a pgx transaction (PostgreSQL).
func (i *Inbox) ClaimPgx(ctx context.Context, tx pgx.Tx, eventID string) (bool, error) {
	if eventID == "" {
		return false, ErrNoEventID
	}
	tag, err := tx.Exec(ctx, i.claim, eventID, i.group, time.Now().Add(i.ttl).UTC())
	if err != nil {
		return false, fmt.Errorf("inbox: record event %s: %w", eventID, err)
	}
	return tag.RowsAffected() == 1, nil
}

// Process runs fn in a transaction of db unless the group already
// processed eventID, and commits fn's work with the record of it. It
// reports whether fn ran; an error from fn rolls both back.
func (i *Inbox) Process(ctx context.Context, db *sql.DB, eventID string, fn func(ctx context.Context, tx *sql.Tx) error) (bool, error) {
	tx, err := db.BeginTx(ctx, nil)
	if err != nil {
		return false, fmt.Errorf("inbox: begin: %w", err)
	}
	defer func() { _ = tx.Rollback() }()
	first, err := i.Claim(ctx, tx, eventID)
	if err != nil || !first {
		return false, err
	}
	if err := fn(ctx, tx); err != nil {
		return false, err
	}
	if err := tx.Commit(); err != nil {
		return false, fmt.Errorf("inbox: commit: %w", err)
	}
	return true, nil
}

// ProcessPgx is Process for a pgx pool or connection (PostgreSQL).
func (i *Inbox) ProcessPgx(ctx context.Context, db interface {
	Begin(ctx context.Context) (pgx.Tx, error)
}, eventID string, fn func(ctx context.Context, tx pgx.Tx) error) (bool, error) {
	ran := false
	err := pgx.BeginFunc(ctx, db, func(tx pgx.Tx) error {
		first, err := i.ClaimPgx(ctx, tx, eventID)
		if err != nil || !first {
			return err
		}
		ran = true
		return fn(ctx, tx)
	})
	if err != nil {
		return false, err
	}
	return ran, nil
}

// Migrate creates table Own (keyed by consumer group and event id) if it
// does not exist.
func Migrate(ctx context.Context, db *sql.DB, dialect Dialect) error {
	t := Own
	// MySQL and MariaDB keep UTC in a DATETIME, compared with
	// UTC_TIMESTAMP(): no session time zone comes between.
	ts, now := "TIMESTAMPTZ", "CURRENT_TIMESTAMP"
	if dialect == MySQL {
		ts, now = "DATETIME(6)", "UTC_TIMESTAMP(6)"
	}
	q := `CREATE TABLE IF NOT EXISTS ` + quoteName(dialect, t.Name) + ` (
  consumer_group VARCHAR(100) NOT NULL,
  event_id VARCHAR(100) NOT NULL,
  processed_at ` + ts + ` NOT NULL DEFAULT (` + now + `),
  expires_at ` + ts + ` NOT NULL,
  PRIMARY KEY (consumer_group, event_id))`
	if _, err := db.ExecContext(ctx, q); err != nil {
		return fmt.Errorf("inbox: create %s: %w", t.Name, err)
	}
	idx := "CREATE INDEX IF NOT EXISTS outbox_inbox_expires ON " + quoteName(dialect, t.Name) + " (expires_at)"
	if dialect == MySQL {
		// MySQL has no IF NOT EXISTS for indexes; the table's creation
		// above is the migration's one step there.
		return nil
	}
	if _, err := db.ExecContext(ctx, idx); err != nil {
		return fmt.Errorf("inbox: index %s: %w", t.Name, err)
	}
	return nil
}

// Purge deletes the expired ids of table, batch at a time (1,000 when 0),
// and returns how many it deleted.
func Purge(ctx context.Context, db *sql.DB, dialect Dialect, table Table, batch int) (int, error) {
	if batch <= 0 {
		batch = 1000
	}
	name, exp := quoteName(dialect, table.Name), quote(dialect, table.ExpiresAt)
	var q string
	if dialect == MySQL {
		q = fmt.Sprintf("DELETE FROM %s WHERE %s < UTC_TIMESTAMP(6) LIMIT %d", name, exp, batch)
	} else {
		q = fmt.Sprintf("DELETE FROM %s WHERE ctid = ANY(ARRAY(SELECT ctid FROM %s WHERE %s < now() LIMIT %d))", name, name, exp, batch)
	}
	total := 0
	for {
		res, err := db.ExecContext(ctx, q)
		if err != nil {
			return total, fmt.Errorf("inbox: purge %s: %w", table.Name, err)
		}
		n, err := res.RowsAffected()
		if err != nil {
			return total, err
		}
		total += int(n)
		if n < int64(batch) {
			return total, nil
		}
	}
}

func quote(d Dialect, ident string) string { return sqlident.Quote(d == MySQL, ident) }

func quoteName(d Dialect, name string) string { return sqlident.QuoteName(d == MySQL, name) }
