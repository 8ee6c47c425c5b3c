package mysql

import (
	"context"
	"database/sql"
	"errors"
	"fmt"
	"slices"
	"strconv"
	"sync"
	"time"

	"github.com/outbox-relay/outbox-relay/internal/layout"
	"github.com/outbox-relay/outbox-relay/internal/source"
)

// DefaultRelayDatabase is where the relay keeps its own tables unless told
// otherwise, like PostgreSQL's relay schema.
const DefaultRelayDatabase = "outbox_relay"

// Options configure one source's store.
type Options struct {
	Source        string // the source's name
	Table         Table
	RelayDatabase string // default DefaultRelayDatabase
	Layout        *layout.Layout
	Ordering      bool
}

// Validate checks every identifier the store will put in SQL; the error
// names the field. A layout's column names come from the catalogue, but a
// name MySQL accepts (a backtick, 65 characters) is still refused here.
func (o Options) Validate() error {
	if err := o.Table.Validate(); err != nil {
		return err
	}
	if err := ValidateIdent("relay_database", o.relayDB()); err != nil {
		return err
	}
	l := o.Layout
	if l == nil {
		return errors.New("layout: not resolved")
	}
	if l.XID != "" {
		return &IdentError{"layout.xid_column", l.XID, "is not supported on MySQL (PostgreSQL only)"}
	}
	cols := []struct{ field, name string }{
		{"layout.id", l.ID.Name}, {"layout.payload", l.Payload.Name},
	}
	opt := []struct{ field, name string }{
		{"layout.headers", l.Headers}, {"layout.event_type", l.EventType}, {"layout.aggregate_type", l.AggregateType},
		{"layout.aggregate_id", l.AggregateID}, {"layout.created_at", l.CreatedAt}, {"layout.order_by", l.OrderBy},
		{"layout.retry_count", l.RetryCount}, {"layout.max_retries", l.MaxRetries}, {"layout.error", l.Error},
		{"layout.state.flag", l.Flag}, {"layout.state.published_at", l.PublishedAt}, {"layout.state.status", l.Status},
		{"layout.state.errored", l.Errored.Name},
	}
	for _, c := range opt {
		if c.name != "" {
			cols = append(cols, c)
		}
	}
	for field, t := range map[string][]string{"layout.topic": l.Topic.Columns(), "layout.key": l.Key.Columns(), "layout.partition_key": l.PartitionKey.Columns()} {
		for _, c := range t {
			cols = append(cols, struct{ field, name string }{field, c})
		}
	}
	for _, t := range append(slices.Clone(l.OrderKeys), l.Extra...) {
		for _, c := range t.Columns() {
			cols = append(cols, struct{ field, name string }{"layout.order_key", c})
		}
	}
	for _, c := range cols {
		if err := ValidateIdent(c.field, c.name); err != nil {
			return err
		}
	}
	return nil
}

func (o Options) relayDB() string {
	if o.RelayDatabase == "" {
		return DefaultRelayDatabase
	}
	return o.RelayDatabase
}

// Store is the MySQL/MariaDB store of one source.
type Store struct {
	db      *sql.DB
	opts    Options
	sql     statements
	invalid error // from Options.Validate: every call returns it
	opened  bool  // db came from Open: its sessions are set up already
	id      idKind

	mu      sync.Mutex
	columns []tableColumn // the table's columns, looked up on first need
}

// New builds the store of one source; the layout must be resolved against
// the table (see Columns). New does not fail: options that do not validate
// make every call return the error (call Options.Validate to fail early).
func New(db *sql.DB, opts Options) *Store {
	opts.RelayDatabase = opts.relayDB()
	s := &Store{db: db, opts: opts, opened: fromOpen(db)}
	if s.invalid = opts.Validate(); s.invalid == nil {
		s.sql = buildStatements(opts.Layout, opts.Table.String(), opts.RelayDatabase, opts.Ordering)
		s.id = kindOf(opts.Layout.ID)
	}
	return s
}

// Claim implements source.Store: the claim is a transaction on one
// connection that stays open until Complete or Release.
func (s *Store) Claim(ctx context.Context, limit int) (source.Batch, error) {
	if s.invalid != nil {
		return nil, s.invalid
	}
	var opts *sql.TxOptions
	if !s.opened {
		// A pool not made by Open may default to REPEATABLE READ, whose gap
		// locks would block the application's inserts while a batch is held.
		opts = &sql.TxOptions{Isolation: sql.LevelReadCommitted}
	}
	tx, err := s.db.BeginTx(ctx, opts)
	if err != nil {
		return nil, fmt.Errorf("claim: begin: %w", err)
	}
	// The retry state's subqueries: attempts, then due.
	args := []any{s.opts.Source, s.opts.Source}
	if s.opts.Ordering {
		args = append(args, s.opts.Source)
	}
	args = append(args, limit)
	rows, err := tx.QueryContext(ctx, s.sql.claim, args...)
	if err != nil {
		_ = tx.Rollback()
		return nil, fmt.Errorf("claim from %s: %w", s.opts.Table, err)
	}
	b := &batch{store: s, tx: tx}
	for rows.Next() {
		b.rows = append(b.rows, source.Row{})
		if err := scanRow(rows, len(s.opts.Layout.Extra), &b.rows[len(b.rows)-1]); err != nil {
			_ = rows.Close()
			_ = tx.Rollback()
			return nil, fmt.Errorf("claim from %s: decode: %w", s.opts.Table, err)
		}
	}
	if err := rows.Err(); err != nil {
		_ = tx.Rollback()
		return nil, fmt.Errorf("claim from %s: %w", s.opts.Table, err)
	}
	if len(b.rows) == 0 {
		if err := tx.Rollback(); err != nil {
			return nil, fmt.Errorf("claim: rollback: %w", err)
		}
		return nil, nil
	}
	return b, nil
}

// RecordStats implements source.Store: one statement reads the backlog and
// the open dead letters, a second adds the counters to relay_state.
func (s *Store) RecordStats(ctx context.Context, st source.Stats) (source.Gauges, error) {
	var g source.Gauges
	if s.invalid != nil {
		return g, s.invalid
	}
	var age sql.NullInt64
	if err := s.db.QueryRowContext(ctx, s.sql.gauges, s.opts.Source).Scan(&g.Backlog.Pending, &age, &g.DeadLetters); err != nil {
		return g, fmt.Errorf("read backlog of %s: %w", s.opts.Table, err)
	}
	if age.Valid {
		g.Backlog.OldestAge = max(time.Duration(age.Int64)*time.Microsecond, 0)
	}
	schema := s.opts.Table.Schema
	if schema == "" {
		if err := s.db.QueryRowContext(ctx, "SELECT COALESCE(DATABASE(), '')").Scan(&schema); err != nil {
			return g, fmt.Errorf("record relay state: %w", err)
		}
	}
	_, err := s.db.ExecContext(ctx, s.sql.stats, s.opts.Source, schema, s.opts.Table.Name, st.LastPublishedID,
		st.Published, st.Retried, st.DeadLettered, g.Backlog.Pending, g.Backlog.OldestAge.Seconds())
	if err != nil {
		return g, fmt.Errorf("record relay state: %w", err)
	}
	return g, nil
}

// idArg converts an event id back to the id column's Go type, so that
// integer ids compare as integers (a quoted bigint would compare as a
// double and lose precision).
func (s *Store) idArg(id string) (any, error) {
	switch s.id {
	case idSigned:
		return strconv.ParseInt(id, 10, 64)
	case idUnsigned:
		return strconv.ParseUint(id, 10, 64)
	}
	return id, nil
}

// idWrap is how an id placeholder is written for the id column.
func (s *Store) idWrap() string {
	if s.id == idBinary {
		return "UNHEX(%s)"
	}
	return ""
}

func truncate(s string) string {
	const maxLen = 2000
	if len(s) > maxLen {
		return s[:maxLen] + "..."
	}
	return s
}

// cutOrderKey bounds an order key to retry_state.order_key's length in
// characters, as the claim's comparison does.
func cutOrderKey(k string) string {
	n := 0
	for i := range k {
		if n == maxOrderKeyLen {
			return k[:i]
		}
		n++
	}
	return k
}
