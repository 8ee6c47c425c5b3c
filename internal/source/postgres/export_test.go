package postgres

// ClaimSQL is the claim statement, the settings its transaction runs with
// and whether it takes a window ($3), for tests of its plan.
func (s *Store) ClaimSQL() (settings, claim string, windowed bool) {
	return claimSettings, s.sql.claim.plain, s.sql.claim.windowed
}
