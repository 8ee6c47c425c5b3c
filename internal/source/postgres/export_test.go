package postgres

// ClaimSQL is the claim statement and the settings its transaction runs
// with, for tests of its plan.
func (s *Store) ClaimSQL() (settings, claim string) { return claimSettings, s.sql.claim }
