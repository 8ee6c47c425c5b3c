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

// Lease is a shard held by this process.
type Lease = source.Lease

// Leases grants shards to one owner at a time through the relay schema's
// leases table. Acquire takes a free or expired shard (or renews one this
// owner holds); Renew extends it; Release gives it up at once.
type Leases struct {
	pool   *pgxpool.Pool
	schema string
	owner  string
}

// NewLeases returns the lease table of relaySchema for owner.
func NewLeases(pool *pgxpool.Pool, relaySchema, owner string) *Leases {
	return &Leases{pool: pool, schema: QuoteIdent(relaySchema), owner: owner}
}

// Acquire takes shard for ttl. It returns nil (and no error) while another
// owner holds an unexpired lease on it and is alive. An owner with no
// connection left to the database (its process died) is not waited for:
// its lease is expired at once, so a restarted relay resumes right away.
func (l *Leases) Acquire(ctx context.Context, shard string, ttl time.Duration) (*Lease, error) {
	ls, err := l.acquire(ctx, shard, ttl)
	if ls != nil || err != nil {
		return ls, err
	}
	var (
		holder string
		term   int64
		alive  bool
	)
	err = l.pool.QueryRow(ctx, `SELECT owner, term FROM `+l.schema+`.leases WHERE shard = $1`, shard).Scan(&holder, &term)
	if errors.Is(err, pgx.ErrNoRows) {
		return nil, nil
	}
	if err == nil {
		err = l.pool.QueryRow(ctx, "SELECT EXISTS (SELECT 1 FROM pg_stat_activity WHERE application_name = $1)",
			ApplicationName(holder)).Scan(&alive)
	}
	if err != nil {
		return nil, fmt.Errorf("look up lease holder of %s: %w", shard, err)
	}
	if alive {
		return nil, nil
	}
	if _, err := l.pool.Exec(ctx, `UPDATE `+l.schema+`.leases SET expires_at = now() - interval '1 millisecond'
WHERE shard = $1 AND owner = $2 AND term = $3`, shard, holder, term); err != nil {
		return nil, fmt.Errorf("expire the lease of a gone owner on %s: %w", shard, err)
	}
	return l.acquire(ctx, shard, ttl)
}

func (l *Leases) acquire(ctx context.Context, shard string, ttl time.Duration) (*Lease, error) {
	var (
		term    int64
		prev    *string
		unended string
	)
	// A change of owner adds the previous one to the owners whose claims
	// may still be open (normalised below).
	err := l.pool.QueryRow(ctx, `WITH prev AS (SELECT owner FROM `+l.schema+`.leases WHERE shard = $1)
INSERT INTO `+l.schema+`.leases AS t (shard, owner, term, expires_at)
VALUES ($1, $2, 1, now() + $3 * interval '1 millisecond')
ON CONFLICT (shard) DO UPDATE SET
  owner = excluded.owner,
  term = t.term + CASE WHEN t.owner = excluded.owner THEN 0 ELSE 1 END,
  acquired_at = CASE WHEN t.owner = excluded.owner THEN t.acquired_at ELSE now() END,
  expires_at = excluded.expires_at,
  unended = CASE WHEN t.owner = excluded.owner THEN t.unended ELSE t.unended || ' ' || t.owner END
WHERE t.owner = excluded.owner OR t.expires_at < now()
RETURNING term, (SELECT owner FROM prev), unended`, shard, l.owner, ttl.Milliseconds()).Scan(&term, &prev, &unended)
	if errors.Is(err, pgx.ErrNoRows) {
		return nil, nil
	}
	if err != nil {
		return nil, fmt.Errorf("acquire lease on %s: %w", shard, err)
	}
	ls := &Lease{Shard: shard, Owner: l.owner, Term: term}
	if prev != nil && *prev != l.owner {
		ls.PreviousOwner = *prev
	}
	ls.Unended = source.NextUnended(source.SplitOwners(unended), "", l.owner)
	if norm := source.JoinOwners(ls.Unended); norm != unended {
		if _, err := l.pool.Exec(ctx, `UPDATE `+l.schema+`.leases SET unended = $4 WHERE shard = $1 AND owner = $2 AND term = $3`,
			shard, l.owner, term, norm); err != nil {
			return nil, fmt.Errorf("acquire lease on %s: %w", shard, err)
		}
	}
	return ls, nil
}

// Ended says the owner of ls has ended the claims of every owner in
// ls.Unended: the next owner need not.
func (l *Leases) Ended(ctx context.Context, ls *Lease) error {
	_, err := l.pool.Exec(ctx, `UPDATE `+l.schema+`.leases SET unended = '' WHERE shard = $1 AND owner = $2 AND term = $3`,
		ls.Shard, ls.Owner, ls.Term)
	if err != nil {
		return fmt.Errorf("record the previous owners' claims ended on %s: %w", ls.Shard, err)
	}
	return nil
}

// Renew extends a lease this owner still holds with the same term; false
// means it was lost.
func (l *Leases) Renew(ctx context.Context, ls *Lease, ttl time.Duration) (bool, error) {
	tag, err := l.pool.Exec(ctx, `UPDATE `+l.schema+`.leases SET expires_at = now() + $4 * interval '1 millisecond'
WHERE shard = $1 AND owner = $2 AND term = $3 AND expires_at >= now()`, ls.Shard, ls.Owner, ls.Term, ttl.Milliseconds())
	if err != nil {
		return false, fmt.Errorf("renew lease on %s: %w", ls.Shard, err)
	}
	return tag.RowsAffected() == 1, nil
}

// Release ends a lease now so that another replica can take the shard
// without waiting for it to expire.
func (l *Leases) Release(ctx context.Context, ls *Lease) error {
	_, err := l.pool.Exec(ctx, `UPDATE `+l.schema+`.leases SET expires_at = now() - interval '1 millisecond'
WHERE shard = $1 AND owner = $2 AND term = $3`, ls.Shard, ls.Owner, ls.Term)
	if err != nil {
		return fmt.Errorf("release lease on %s: %w", ls.Shard, err)
	}
	return nil
}

// ApplicationName is the application_name a relay process's connections
// carry, so that a new owner can see whether the previous one is alive and
// still has transactions open.
func ApplicationName(owner string) string {
	n := "outbox-relay " + owner
	if len(n) > 63 {
		n = n[:63]
	}
	return n
}

// EndOwner ends the previous owner's claims on table after a hand-over and
// returns once none is left: it terminates every session of owner that has
// a transaction open holding a lock on table (a role may end its own role's
// sessions), then waits until they are gone. A session it may not end (run
// by another role) is waited for instead, and said so in the error passed
// to warn. It returns only when no such session is left, or when ctx ends:
// the new owner claims nothing before.
func (l *Leases) EndOwner(ctx context.Context, owner string, table string, warn func(error)) error {
	for {
		rows, err := l.pool.Query(ctx, `SELECT a.pid FROM pg_stat_activity a
WHERE a.application_name = $1 AND a.pid <> pg_backend_pid()
  AND (a.xact_start IS NOT NULL OR a.state IS NULL)
  AND EXISTS (SELECT 1 FROM pg_locks k WHERE k.pid = a.pid AND k.relation = to_regclass($2))`, ApplicationName(owner), table)
		if err != nil {
			return fmt.Errorf("look for the previous owner's claims: %w", err)
		}
		pids, err := pgx.CollectRows(rows, pgx.RowTo[int32])
		if err != nil {
			return fmt.Errorf("look for the previous owner's claims: %w", err)
		}
		if len(pids) == 0 {
			return nil
		}
		for _, pid := range pids {
			if _, err := l.pool.Exec(ctx, "SELECT pg_terminate_backend($1)", pid); err != nil && warn != nil && ctx.Err() == nil {
				warn(fmt.Errorf("end the previous owner's session %d: %w; waiting for it instead", pid, err))
			}
		}
		select {
		case <-ctx.Done():
			return ctx.Err()
		case <-time.After(50 * time.Millisecond):
		}
	}
}
