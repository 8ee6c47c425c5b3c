package source

import (
	"context"
	"errors"
	"fmt"
)

// Tx is a dialect's transaction as the dead-letter flows use it.
type Tx interface {
	// Exec runs a statement and returns the rows it affected.
	Exec(ctx context.Context, q string, args ...any) (int64, error)
	// QueryRow reads one row into dest; false when there is none.
	QueryRow(ctx context.Context, q string, args []any, dest ...any) (bool, error)
	Commit(ctx context.Context) error
	Rollback(ctx context.Context) error
}

// DeadLetterDriver is what a dialect supplies to the dead-letter flows: a
// transaction, and what a refused grant looks like.
type DeadLetterDriver interface {
	Begin(ctx context.Context) (Tx, error)
	// NoPrivilege returns the dialect's sentinel error when err is the
	// database refusing for lack of a grant, else nil.
	NoPrivilege(err error) error
}

// ReplayStatements are a store's statements for Replay.
type ReplayStatements struct {
	Source string // the store's source
	Table  string // its table, as messages name it
	// Reset puts the row (the event id) back in the pending set; "" when
	// the layout keeps no state to reset (it deletes its rows).
	Reset string
	// Present, when set, counts the rows with the event id after Reset,
	// where the rows Reset affected do not say whether the row is there
	// (a row already pending is matched, not changed).
	Present string
	// Restore returns the statement that inserts the row again from the
	// copy its dead letter (the dead letter's id) kept.
	Restore func(ctx context.Context) (string, error)
	// ClearRetry resets the retry state (the source, the event id): it
	// deletes it or, for a store whose rows behind its position wait in
	// retry_state (capture cursor), makes it due at once, with no attempt.
	ClearRetry string
	// MarkReplayed marks the dead letter (its id) replayed.
	MarkReplayed string
	// Audit records the replay: the dead letter's id, the actor, the
	// detail.
	Audit string
	// Wake, when set, wakes the relay at commit, with WakeArgs.
	Wake     string
	WakeArgs []any
}

// Replay puts dead letters back into the pending set, each in its own
// transaction: the row is reset to pending (or, when it is gone, inserted
// again from the copy failed_events kept), its retry state is cleared, the
// dead letter is marked replayed and an audit row records who did it. Dead
// letters of another source are refused. It returns how many it replayed.
func Replay(ctx context.Context, d DeadLetterDriver, s ReplayStatements, events []FailedEvent, actor string) (int, error) {
	n := 0
	for _, e := range events {
		if e.Source != s.Source {
			return n, fmt.Errorf("replay %s: dead letter belongs to source %q, not %q", e.ID, e.Source, s.Source)
		}
		if err := inTx(ctx, d, func(tx Tx) error { return replayOne(ctx, d, tx, s, e, actor) }); err != nil {
			return n, fmt.Errorf("replay %s (event %s): %w", e.ID, e.OriginalEventID, err)
		}
		n++
	}
	return n, nil
}

func replayOne(ctx context.Context, d DeadLetterDriver, tx Tx, s ReplayStatements, e FailedEvent, actor string) error {
	restored := false
	if s.Reset != "" {
		n, err := tx.Exec(ctx, s.Reset, e.OriginalEventID)
		if err != nil {
			return fmt.Errorf("reset row: %w", err)
		}
		if s.Present != "" {
			if _, err := tx.QueryRow(ctx, s.Present, []any{e.OriginalEventID}, &n); err != nil {
				return fmt.Errorf("reset row: %w", err)
			}
		}
		restored = n > 0
	}
	if !restored {
		q, err := s.Restore(ctx)
		if err != nil {
			return err
		}
		n, err := tx.Exec(ctx, q, e.ID)
		if err != nil {
			if perr := d.NoPrivilege(err); perr != nil {
				return fmt.Errorf("restore deleted row (needs INSERT on %s): %w: %w", s.Table, perr, err)
			}
			return fmt.Errorf("restore deleted row: %w", err)
		}
		if n == 0 {
			return errors.New("restore deleted row: no copy of the row was kept")
		}
	}
	if _, err := tx.Exec(ctx, s.ClearRetry, s.Source, e.OriginalEventID); err != nil {
		return fmt.Errorf("clear retry state: %w", err)
	}
	if _, err := tx.Exec(ctx, s.MarkReplayed, e.ID); err != nil {
		return fmt.Errorf("mark replayed: %w", err)
	}
	if _, err := tx.Exec(ctx, s.Audit, e.ID, actor, "event "+e.OriginalEventID+" back to pending in "+s.Table); err != nil {
		return fmt.Errorf("audit: %w", err)
	}
	if s.Wake != "" {
		if _, err := tx.Exec(ctx, s.Wake, s.WakeArgs...); err != nil {
			return fmt.Errorf("wake the relay: %w", err)
		}
	}
	return nil
}

// PurgeDeadStatements are a relay schema's statements for PurgeDead, each
// taking a dead letter's id.
type PurgeDeadStatements struct {
	// Lock locks the dead letter if it is there and not replayed, and
	// reads its original event id and source.
	Lock   string
	Delete string
	// Audit records the purge: the id, the actor, the detail.
	Audit string
}

// PurgeDead deletes the dead letters with ids that were not replayed, each
// with an audit row naming actor and the event, in one transaction; the
// rows in the application's table stay as they are. It returns how many it
// deleted.
func PurgeDead(ctx context.Context, d DeadLetterDriver, s PurgeDeadStatements, ids []string, actor string) (int, error) {
	n := 0
	err := inTx(ctx, d, func(tx Tx) error {
		for _, id := range ids {
			var event, src string
			ok, err := tx.QueryRow(ctx, s.Lock, []any{id}, &event, &src)
			if err != nil {
				return err
			}
			if !ok {
				continue
			}
			if _, err := tx.Exec(ctx, s.Delete, id); err != nil {
				return err
			}
			if _, err := tx.Exec(ctx, s.Audit, id, actor, "event "+event+" of source "+src+" deleted from the dead letters"); err != nil {
				return fmt.Errorf("audit: %w", err)
			}
			n++
		}
		return nil
	})
	if err != nil {
		return 0, fmt.Errorf("purge dead letters: %w", err)
	}
	return n, nil
}

// inTx runs fn in a transaction of d, committed when fn succeeds.
func inTx(ctx context.Context, d DeadLetterDriver, fn func(Tx) error) error {
	tx, err := d.Begin(ctx)
	if err != nil {
		return fmt.Errorf("begin: %w", err)
	}
	defer func() { _ = tx.Rollback(context.WithoutCancel(ctx)) }()
	if err := fn(tx); err != nil {
		return err
	}
	if err := tx.Commit(ctx); err != nil {
		return fmt.Errorf("commit: %w", err)
	}
	return nil
}
