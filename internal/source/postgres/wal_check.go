package postgres

import (
	"context"
	"errors"
	"fmt"

	"github.com/jackc/pgx/v5"
)

// CheckWAL implements driver.WALChecker: what the database lacks for
// capture wal (problems) and how the source's slot stands (notes).
func (s *WALStore) CheckWAL(ctx context.Context) (problems, notes []string, err error) {
	var (
		level     string
		replicate bool
	)
	err = s.pool.QueryRow(ctx, `SELECT current_setting('wal_level'),
  r.rolreplication OR r.rolsuper OR CASE WHEN EXISTS (SELECT 1 FROM pg_roles WHERE rolname = 'rds_replication')
    THEN pg_has_role(current_user, 'rds_replication', 'member') ELSE false END
FROM pg_roles r WHERE r.rolname = current_user`).Scan(&level, &replicate)
	if err != nil {
		return nil, nil, fmt.Errorf("check capture wal: %w", err)
	}
	if level != "logical" {
		problems = append(problems, fmt.Sprintf("wal_level is %s: capture wal needs logical (a server restart)", level))
	}
	if !replicate {
		problems = append(problems, "this role may not replicate: ALTER ROLE ... REPLICATION (on RDS and Aurora: GRANT rds_replication)")
	}
	var (
		active         bool
		status, behind *string
	)
	err = s.pool.QueryRow(ctx, `SELECT active, wal_status, pg_size_pretty(pg_current_wal_lsn() - confirmed_flush_lsn)
FROM pg_replication_slots WHERE slot_name = $1`, s.slot).Scan(&active, &status, &behind)
	switch {
	case err == nil:
		state := "not streamed"
		if active {
			state = "streamed"
		}
		notes = append(notes, fmt.Sprintf("slot %s: %s, %s of WAL not yet confirmed, wal_status %s",
			s.slot, state, deref(behind, "?"), deref(status, "?")))
		if status != nil && *status == "lost" {
			problems = append(problems, fmt.Sprintf("slot %s lost the WAL it needs (max_slot_wal_keep_size): drop it, and run makes it again", s.slot))
		}
	case errors.Is(err, pgx.ErrNoRows):
		notes = append(notes, fmt.Sprintf("slot %s: not made yet; run makes it, with publication %s", s.slot, s.name))
	default:
		return problems, notes, fmt.Errorf("check capture wal: slot %s: %w", s.slot, err)
	}
	return problems, notes, nil
}

func deref(s *string, none string) string {
	if s == nil {
		return none
	}
	return *s
}
