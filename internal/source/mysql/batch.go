package mysql

import (
	"context"
	"database/sql"
	"database/sql/driver"
	"errors"
	"fmt"
	"strings"
	"sync/atomic"
	"time"

	"github.com/outbox-relay/outbox-relay/internal/source"
)

// maxInList bounds the ids of one statement.
const maxInList = 1000

// batch is a claim held by an open transaction.
type batch struct {
	store     *Store
	conn      *sql.Conn // the claim's own connection, when its wait_timeout was set for it
	tx        *sql.Tx
	rows      []source.Row
	id        string        // a uuid, recorded on acknowledged rows when the layout keeps claims
	claimedAt time.Time     // the server's time at the claim
	lease     *source.Lease // the lease the batch was claimed under, or nil
	counted   bool          // the store counts the batch among those it holds
	ended     atomic.Bool   // completed or released
}

// done hands a connection taken for the claim back, its wait_timeout put
// back first. A connection the server closed meanwhile is dropped.
func (b *batch) done() {
	if b.counted && b.ended.CompareAndSwap(false, true) {
		b.store.held.Add(-1)
		b.store.track(b.rows, false)
	}
	if b.conn == nil {
		return
	}
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	defer cancel()
	if _, err := b.conn.ExecContext(ctx, b.store.waitReset); err != nil {
		_ = b.conn.Raw(func(any) error { return driver.ErrBadConn })
	}
	_ = b.conn.Close()
	b.conn = nil
}

func (b *batch) Rows() []source.Row { return b.rows }

// Release implements source.Batch: ROLLBACK gives every row back.
func (b *batch) Release(context.Context) error {
	err := b.tx.Rollback()
	b.done()
	if err != nil && !errors.Is(err, sql.ErrTxDone) {
		return fmt.Errorf("release claim: %w", err)
	}
	return nil
}

// Complete implements source.Batch: acknowledgements, retry state and dead
// letters are written in the claim's transaction, which then commits.
func (b *batch) Complete(ctx context.Context, o source.Outcome) error {
	defer b.done()
	if err := b.complete(ctx, o); err != nil {
		_ = b.tx.Rollback()
		return fmt.Errorf("complete batch on %s: %w", b.store.opts.Table, err)
	}
	if err := b.tx.Commit(); err != nil {
		return fmt.Errorf("complete batch on %s: commit: %w", b.store.opts.Table, err)
	}
	return nil
}

func (b *batch) complete(ctx context.Context, o source.Outcome) error {
	// A row with attempts may have retry state (the table's own counter
	// may count attempts another relay made: forgetting nothing is harmless).
	c := source.PlanCompletion(b.rows, o, func(i int) bool { return b.rows[i].Attempts > 0 })
	return source.WriteCompletion(ctx, b, c, b.lease != nil)
}

// CheckLease implements source.CompletionWriter. The read (READ COMMITTED)
// sees the lease as it is now, and takes no lock: a holder frozen inside
// this transaction would otherwise keep every replica from taking the
// lease over. A takeover committed after it finds this transaction open
// and ends it (Leases.EndOwner) before the new holder claims anything.
func (b *batch) CheckLease(ctx context.Context) error { return b.checkLease(ctx, "") }

// Acknowledge implements source.CompletionWriter.
func (b *batch) Acknowledge(ctx context.Context, rows []int) error {
	ids := make([]string, len(rows))
	for i, idx := range rows {
		ids[i] = b.rows[idx].ID
	}
	return b.acknowledgeIDs(ctx, "acknowledge", ids)
}

// acknowledgeIDs records the rows with ids as published, or deletes them.
func (b *batch) acknowledgeIDs(ctx context.Context, what string, ids []string) error {
	s := b.store
	sets := ""
	var setArgs []any
	if s.opts.Layout.Mode != "delete" {
		sets = s.sql.ackSets
		if s.sql.ackClaim {
			setArgs = []any{b.id, b.claimedAt}
		}
	}
	return b.byIDs(ctx, what, sets, ids, setArgs...)
}

// ForgetRetries implements source.CompletionWriter.
func (b *batch) ForgetRetries(ctx context.Context, ids []string) error {
	return b.store.forgetRetries(ctx, b.tx, ids)
}

// forgetRetries deletes the retry state of ids, a chunk at a time.
func (s *Store) forgetRetries(ctx context.Context, tx *sql.Tx, ids []string) error {
	for chunk := range chunks(ids) {
		q := "DELETE FROM " + QuoteIdent(s.opts.RelayDatabase) + ".retry_state WHERE source = ? AND event_id IN (" + placeholders(len(chunk), "") + ")"
		args := []any{s.opts.Source}
		for _, id := range chunk {
			args = append(args, id)
		}
		if _, err := tx.ExecContext(ctx, q, args...); err != nil {
			return err
		}
	}
	return nil
}

// rowsByID is how a statement finds the rows with ids: target joins a
// derived table u(id) of the ids to the table, so that each row is found by
// its key whatever the planner believes of the table's size. An IN list,
// even forced onto the primary key, was measured a little cheaper but on a
// small table whose statistics lag it read rows outside the list and so
// waited on another claimer's rows: a deadlock. where is empty for this
// form; the statement's arguments are pre, its SET list's, then post.
func (s *Store) rowsByID(_ context.Context, ids []string) (target, where string, pre, post []any, err error) {
	args := make([]any, len(ids))
	for i, id := range ids {
		v, err := s.idArg(id)
		if err != nil {
			return "", "", nil, nil, fmt.Errorf("id %q: %w", id, err)
		}
		args[i] = v
	}
	ph := "?"
	if w := s.idWrap(); w != "" {
		ph = fmt.Sprintf(w, "?")
	}
	var b strings.Builder
	for i := range ids {
		if i == 0 {
			b.WriteString("(SELECT " + ph + " AS id")
		} else {
			b.WriteString(" UNION ALL SELECT " + ph)
		}
	}
	b.WriteString(") u STRAIGHT_JOIN " + s.opts.Table.String() + " AS o ON " + sq.Col("o", s.opts.Layout.ID.Name) + " = u.id")
	return b.String(), "", args, nil, nil
}

// update runs UPDATE target SET sets on the rows with ids.
func (b *batch) update(ctx context.Context, sets string, setArgs []any, ids []string) error {
	target, where, pre, post, err := b.store.rowsByID(ctx, ids)
	if err != nil {
		return err
	}
	q := "UPDATE " + target + " SET " + sets
	if where != "" {
		q += " WHERE " + where
	}
	args := append(append(pre, setArgs...), post...)
	_, err = b.tx.ExecContext(ctx, q, args...)
	return err
}

// byIDs deletes the rows with ids (sets empty) or updates them with sets, a
// chunk at a time.
func (b *batch) byIDs(ctx context.Context, what, sets string, ids []string, setArgs ...any) error {
	for chunk := range chunks(ids) {
		if sets != "" {
			if err := b.update(ctx, sets, setArgs, chunk); err != nil {
				return fmt.Errorf("%s: %w", what, err)
			}
			continue
		}
		target, where, pre, post, err := b.store.rowsByID(ctx, chunk)
		if err != nil {
			return fmt.Errorf("%s: %w", what, err)
		}
		q := "DELETE o FROM " + target
		if where != "" {
			q += " WHERE " + where
		}
		if _, err := b.tx.ExecContext(ctx, q, append(pre, post...)...); err != nil {
			return fmt.Errorf("%s: %w", what, err)
		}
	}
	return nil
}

// RecordRetries implements source.CompletionWriter: it upserts the retry
// state of failed rows and, when the table has them, its retry count and
// error columns.
func (b *batch) RecordRetries(ctx context.Context, rs []source.Retry) error {
	s := b.store
	var vals []string
	var args []any
	for _, r := range rs {
		row := &b.rows[r.Index]
		vals = append(vals, "(?, ?, ?, ?, ?, ?, "+now+", "+now+")")
		args = append(args, s.opts.Source, row.ID, cutOrderKey(row.OrderKey), r.Attempts, r.At.UTC(), r.Err)
	}
	q := "INSERT INTO " + QuoteIdent(s.opts.RelayDatabase) + `.retry_state
  (source, event_id, order_key, attempts, next_attempt_at, last_error, first_failed_at, updated_at)
VALUES ` + strings.Join(vals, ", ") + `
ON DUPLICATE KEY UPDATE order_key = VALUES(order_key), attempts = VALUES(attempts),
  next_attempt_at = VALUES(next_attempt_at), last_error = VALUES(last_error), updated_at = VALUES(updated_at)`
	if _, err := b.tx.ExecContext(ctx, q, args...); err != nil {
		return fmt.Errorf("record retry state: %w", err)
	}
	if l := s.opts.Layout; l.RetryCount == "" && l.Error == "" {
		return nil
	}
	ids := make([]string, len(rs))
	attempts := make([]any, len(rs))
	errs := make([]any, len(rs))
	for i, r := range rs {
		msg, err := s.fitError(ctx, r.Err)
		if err != nil {
			return fmt.Errorf("record retry in the row: %w", err)
		}
		ids[i], attempts[i], errs[i] = b.rows[r.Index].ID, r.Attempts, msg
	}
	return b.updateRows(ctx, "record retry in the row", "", ids, attempts, errs)
}

// updateRows sets the retry count and error columns of rows by id, each
// row its own value (CASE on the id), with extra SET items before them.
func (b *batch) updateRows(ctx context.Context, what, extra string, ids []string, attempts, errs []any) error {
	s := b.store
	wrap := s.idWrap()
	ph := "?"
	if wrap != "" {
		ph = fmt.Sprintf(wrap, "?")
	}
	idArgs := make([]any, len(ids))
	for i, id := range ids {
		v, err := s.idArg(id)
		if err != nil {
			return fmt.Errorf("%s: id %q: %w", what, id, err)
		}
		idArgs[i] = v
	}
	// Each value is chosen by the row's id; the SET list is sqlcore's,
	// the retry count's values first, then the error's.
	caseOf := func(vals []any) (string, []any) {
		var c strings.Builder
		var args []any
		c.WriteString("CASE " + sq.Col("o", s.opts.Layout.ID.Name))
		for i := range ids {
			c.WriteString(" WHEN " + ph + " THEN ?")
			args = append(args, idArgs[i], vals[i])
		}
		c.WriteString(" END")
		return c.String(), args
	}
	attemptsExpr, attemptsArgs := caseOf(attempts)
	errExpr, errArgs := caseOf(errs)
	sets := sq.FailureSets(s.opts.Layout, attemptsExpr, errExpr)
	var args []any
	if s.opts.Layout.RetryCount != "" {
		args = append(args, attemptsArgs...)
	}
	if s.opts.Layout.Error != "" {
		args = append(args, errArgs...)
	}
	if extra != "" {
		sets = append([]string{extra}, sets...)
	}
	if len(sets) == 0 {
		return nil
	}
	if err := b.update(ctx, strings.Join(sets, ", "), args, ids); err != nil {
		return fmt.Errorf("%s: %w", what, err)
	}
	return nil
}

// chunks splits ids into runs of at most maxInList.
func chunks(ids []string) func(func([]string) bool) {
	return func(yield func([]string) bool) {
		for len(ids) > 0 {
			n := min(len(ids), maxInList)
			if !yield(ids[:n]) {
				return
			}
			ids = ids[n:]
		}
	}
}

// checkLease fails with source.ErrLeaseLost when the lease the batch was
// claimed under changed owner or term; lock is appended to the read.
func (b *batch) checkLease(ctx context.Context, lock string) error {
	l := b.lease
	var one int
	err := b.tx.QueryRowContext(ctx, "SELECT 1 FROM "+QuoteIdent(b.store.opts.RelayDatabase)+
		".leases WHERE shard = ? AND owner = ? AND term = ?"+lock, l.Shard, l.Owner, l.Term).Scan(&one)
	if errors.Is(err, sql.ErrNoRows) {
		return fmt.Errorf("%w (term %d of %s)", source.ErrLeaseLost, l.Term, l.Shard)
	}
	if err != nil {
		return fmt.Errorf("check lease: %w", err)
	}
	return nil
}

// MarkPublished records the rows with ids as published (deletes them in
// delete mode) and forgets their retry state, in one transaction: the
// events an exactly-once takeover found in Kafka's progress record. It
// returns how many ids it was given.
func (s *Store) MarkPublished(ctx context.Context, ids []string) (int, error) {
	if len(ids) == 0 {
		return 0, nil
	}
	tx, err := s.db.BeginTx(ctx, nil)
	if err != nil {
		return 0, fmt.Errorf("mark delivered events: %w", err)
	}
	defer func() { _ = tx.Rollback() }()
	b := &batch{store: s, tx: tx, id: source.NewBatchID(), claimedAt: time.Now().UTC()}
	if err := b.acknowledgeIDs(ctx, "mark delivered events", ids); err != nil {
		return 0, err
	}
	if err := s.forgetRetries(ctx, tx, ids); err != nil {
		return 0, fmt.Errorf("mark delivered events: clear retry state: %w", err)
	}
	if err := tx.Commit(); err != nil {
		return 0, fmt.Errorf("mark delivered events: %w", err)
	}
	return len(ids), nil
}
