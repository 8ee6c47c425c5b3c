package mysql

// ClaimSQL is the claim statement of s, for tests of its plan.
func ClaimSQL(s *Store) string { return s.sql.claim }

// ClaimArgs are the claim's arguments for a claim of limit.
func ClaimArgs(s *Store, limit int) []any { return s.claimArgs(limit) }
