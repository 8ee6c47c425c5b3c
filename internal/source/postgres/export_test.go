package postgres

import "github.com/outbox-relay/outbox-relay/internal/layout"

// ClaimSQL is the claim statement, the settings its transaction runs with,
// whether it takes a window ($3) and whether it takes the addresses of the
// rows the store's batches hold ($4), for tests of its plan.
func (s *Store) ClaimSQL() (settings, claim string, windowed, ownRows bool) {
	return s.sql.claim.settings, s.sql.claim.plain, s.sql.claim.windowed, s.sql.claim.ownRows
}

// CursorAheadSQL is the condition that a row (alias) is ahead of the
// position p (a row of PositionOfSQL), for tests that read a row's state.
func CursorAheadSQL(l *layout.Layout, alias, p, orderType string) string {
	return cursorAhead(newRowOrder(l, alias, orderType), p)
}

// PositionOfSQL is the position recorded for source src (an expression).
func PositionOfSQL(relaySchema, src string) string { return positionOf(QuoteIdent(relaySchema), src) }

// ClaimSQL is a cursor's claim: its transaction's settings, the claim of
// retry rows, and the two reads of a range.
func (s *CursorStore) ClaimSQL() (settings, retry string, ranged [2]string) {
	return s.sql.settings, s.sql.retry, s.sql.ranged
}

// Confirmed is where the stream of a store of capture wal lets its slot
// confirm now (its watermark), as text; "" when it is not streaming.
func (s *WALStore) Confirmed() string {
	s.mu.Lock()
	r := s.run
	s.mu.Unlock()
	if r == nil {
		return ""
	}
	r.mu.Lock()
	defer r.mu.Unlock()
	return r.confirmed.String()
}
