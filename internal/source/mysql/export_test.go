package mysql

// ClaimSQL is the claim statement of s, for tests of its plan.
func ClaimSQL(s *Store) string { return s.sql.claim }
