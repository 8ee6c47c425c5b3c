package postgres

// ClaimSQL is the claim statement, the settings its transaction runs with,
// whether it takes a window ($3) and whether it takes the addresses of the
// rows the store's batches hold ($4), for tests of its plan.
func (s *Store) ClaimSQL() (settings, claim string, windowed, ownRows bool) {
	return s.sql.claim.settings, s.sql.claim.plain, s.sql.claim.windowed, s.sql.claim.ownRows
}
