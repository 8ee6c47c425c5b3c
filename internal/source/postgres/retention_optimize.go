package postgres

import (
	"context"
	"errors"
	"fmt"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgxpool"

	"github.com/outbox-relay/outbox-relay/internal/source"
)

// TableStats describe a table's size and tuples as the server counts them.
// Tuple counts come from the statistics system and may lag a second or so
// behind the latest writes.
type TableStats struct {
	TotalBytes int64 // heap, indexes and TOAST
	HeapBytes  int64
	LiveTuples int64
	DeadTuples int64
	// LastVacuum is when the table was last vacuumed by hand (nil if
	// never, or if the server does not track it).
	LastVacuum *time.Time
}

// OptimizeResult is a table's state before and after Optimize.
type OptimizeResult struct {
	Before, After TableStats
	Took          time.Duration
}

// ErrVacuumSkipped is returned when the server skipped the VACUUM, which it
// does (with a warning, not an error) for a role that may not vacuum the
// table: not its owner nor the database's.
var ErrVacuumSkipped = errors.New("the server skipped the VACUUM (only the table's or the database's owner may run it)")

// Optimize runs VACUUM (ANALYZE) on table t: space held by deleted rows
// becomes reusable, empty pages at the end of the table are given back to
// the operating system, and the planner's statistics are refreshed. It
// takes no lock that blocks reads, inserts, updates or deletes, so it is
// safe while the relay runs. It does not rewrite the table (VACUUM FULL
// would lock it for the whole rewrite).
func Optimize(ctx context.Context, pool *pgxpool.Pool, t Table) (OptimizeResult, error) {
	var res OptimizeResult
	tracked, before, err := tableStats(ctx, pool, t)
	if err != nil {
		return res, err
	}
	res.Before = before
	start := time.Now()
	if _, err := pool.Exec(ctx, "VACUUM (ANALYZE) "+t.String()); err != nil {
		if isPrivilegeError(err) {
			return res, fmt.Errorf("vacuum %s: %w: %w", t, source.ErrNoPrivilege, err)
		}
		return res, fmt.Errorf("vacuum %s: %w", t, err)
	}
	res.Took = time.Since(start)
	if _, res.After, err = tableStats(ctx, pool, t); err != nil {
		return res, err
	}
	if tracked {
		// The server only warns when it skips a table; its statistics
		// say whether the VACUUM really ran.
		ran := res.After.LastVacuum != nil &&
			(res.Before.LastVacuum == nil || res.After.LastVacuum.After(*res.Before.LastVacuum))
		if !ran {
			return res, fmt.Errorf("vacuum %s: %w", t, ErrVacuumSkipped)
		}
	}
	return res, nil
}

// tableStats reads t's size and tuple counts, and whether the server keeps
// statistics at all (track_counts).
func tableStats(ctx context.Context, pool *pgxpool.Pool, t Table) (bool, TableStats, error) {
	var (
		s       TableStats
		tracked bool
	)
	err := pool.QueryRow(ctx, `SELECT current_setting('track_counts')::bool,
  pg_total_relation_size(c.oid), pg_relation_size(c.oid),
  COALESCE(s.n_live_tup, 0), COALESCE(s.n_dead_tup, 0), s.last_vacuum
FROM pg_class c
JOIN pg_namespace n ON n.oid = c.relnamespace
LEFT JOIN pg_stat_all_tables s ON s.relid = c.oid
WHERE n.nspname = $1 AND c.relname = $2`, t.Schema, t.Name).Scan(&tracked, &s.TotalBytes, &s.HeapBytes, &s.LiveTuples, &s.DeadTuples, &s.LastVacuum)
	if errors.Is(err, pgx.ErrNoRows) {
		return false, s, fmt.Errorf("size of %s: table not found", t)
	}
	if err != nil {
		return false, s, fmt.Errorf("size of %s: %w", t, err)
	}
	return tracked, s, nil
}
