package mysql

import (
	"context"
	"database/sql"
	"database/sql/driver"
	"fmt"
	"math"
	"strings"
	"time"
)

// Settle waits until no other transaction holds any of the first n pending
// rows, for at most timeout. A relay taking a source over calls it before
// its first claim: the previous owner's claims must be over, or the first
// claim would skip the rows they hold and publish later rows of their keys
// first.
//
// Leases.WaitForOwner finds the previous owner's transactions, but a
// process that died leaves its connections to the server's cleanup, which
// frees a connection's named locks (how its transactions are told apart)
// before it has rolled its transaction back; and the transaction list it
// reads is a cache refreshed ten times a second. A locking read that waits
// is exact: it returns once every row it reaches is free.
func (s *Store) Settle(ctx context.Context, n int, timeout time.Duration) error {
	if s.invalid != nil {
		return s.invalid
	}
	conn, err := s.db.Conn(ctx)
	if err != nil {
		return fmt.Errorf("settle %s: %w", s.opts.Table, err)
	}
	// The connection's lock wait timeout is changed for this read: it is
	// dropped afterwards rather than handed back to the pool.
	defer func() {
		_ = conn.Raw(func(any) error { return driver.ErrBadConn })
		_ = conn.Close()
	}()
	secs := max(1, int(math.Ceil(timeout.Seconds())))
	if _, err := conn.ExecContext(ctx, fmt.Sprintf("SET SESSION innodb_lock_wait_timeout = %d", secs)); err != nil {
		return fmt.Errorf("settle %s: %w", s.opts.Table, err)
	}
	tx, err := conn.BeginTx(ctx, nil)
	if err != nil {
		return fmt.Errorf("settle %s: %w", s.opts.Table, err)
	}
	defer func() { _ = tx.Rollback() }()
	q, args := s.sql.settle, []any{n}
	if s.sql.window != "" {
		// The first n rows a claim could take, read without locks by the
		// pending rows' index, then waited for by primary key.
		if q, args, err = s.settleIDs(ctx, tx, n); err != nil {
			return fmt.Errorf("settle %s: %w", s.opts.Table, err)
		}
		if q == "" {
			return nil
		}
	}
	rows, err := tx.QueryContext(ctx, q, args...)
	if err != nil {
		return fmt.Errorf("settle %s: wait for the rows other transactions hold: %w", s.opts.Table, err)
	}
	for rows.Next() {
	}
	if err := rows.Err(); err != nil {
		return fmt.Errorf("settle %s: %w", s.opts.Table, err)
	}
	return rows.Close()
}

// settleIDs is the locking read of the first n rows of the claim's window,
// and its arguments; "" when the window is empty.
func (s *Store) settleIDs(ctx context.Context, tx *sql.Tx, n int) (string, []any, error) {
	win, err := s.windowRows(ctx, tx, n, false)
	if err != nil || len(win) == 0 {
		return "", nil, err
	}
	ids := make([]any, len(win))
	for i, r := range win {
		if ids[i], err = s.idArg(r.id); err != nil {
			return "", nil, fmt.Errorf("id %q: %w", r.id, err)
		}
	}
	return strings.Replace(s.sql.settle, idsMarker, placeholders(len(ids), s.idWrap()), 1), ids, nil
}
