package mysql

import "context"

// ClaimPlan is one statement of a claim, with its arguments, for tests of
// its plan.
type ClaimPlan struct {
	SQL  string
	Args []any
}

// ClaimPlans are the statements a claim of limit runs on s: its window and
// the locking read of the window's first limit claimable rows, or the
// single claim of a store without a window.
func ClaimPlans(ctx context.Context, s *Store, limit int) ([]ClaimPlan, error) {
	if s.sql.window == "" {
		return []ClaimPlan{{s.sql.claim, s.claimArgs(limit)}}, nil
	}
	tx, err := s.db.BeginTx(ctx, nil)
	if err != nil {
		return nil, err
	}
	defer func() { _ = tx.Rollback() }()
	ids, err := s.claimable(ctx, tx, limit)
	if err != nil {
		return nil, err
	}
	plans := []ClaimPlan{{s.sql.window, s.windowArgs(s.window(limit), nil)}}
	b := &batch{store: s, tx: tx}
	q, a, err := b.claimIDsSQL(windowIDs(ids[:min(limit, len(ids))]))
	return append(plans, ClaimPlan{q, a}), err
}

// StatusTable is the conformance suite's table of the status layout (%s: its
// name).
const StatusTable = statusTable
