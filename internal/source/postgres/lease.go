package postgres

import (
	"context"
	"errors"
	"fmt"
	"sync/atomic"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgxpool"

	"github.com/outbox-relay/outbox-relay/internal/lease"
	"github.com/outbox-relay/outbox-relay/internal/source"
)

// Lease is a shard held by this process.
type Lease = source.Lease

// NewLeases returns the leases of owner in relaySchema's lease table (see
// lease.Leases). An owner is alive while a session carries its
// ApplicationName.
func NewLeases(pool *pgxpool.Pool, relaySchema, owner string) *lease.Leases {
	return lease.New(NewLeaseStore(pool, relaySchema), owner)
}

// LeaseStore is the lease table of a relay schema: lease.Store in
// PostgreSQL's SQL.
type LeaseStore struct {
	pool    *pgxpool.Pool
	schema  string // quoted
	channel string // the relay schema's NOTIFY channel
	// announced says this replica's arrival was told to the others.
	announced atomic.Bool
}

var _ lease.Store = (*LeaseStore)(nil)

// NewLeaseStore returns the lease table of relaySchema.
func NewLeaseStore(pool *pgxpool.Pool, relaySchema string) *LeaseStore {
	return &LeaseStore{pool: pool, schema: QuoteIdent(relaySchema), channel: relaySchema}
}

// LeaseFence implements lease.Fenced.
func (s *Store) LeaseFence() *lease.Fence { return &s.Fence }

// Get implements lease.Store.
func (l *LeaseStore) Get(ctx context.Context, p *lease.GetParams) (*lease.Row, error) {
	var r lease.Row
	err := l.pool.QueryRow(ctx, `SELECT owner, term, expires_at < now(), unended, successor,
  successor <> '' AND expires_at > now() - $2 * interval '1 millisecond'
FROM `+l.schema+`.leases WHERE shard = $1`,
		p.Shard, p.Reserve.Milliseconds()).Scan(&r.Owner, &r.Term, &r.Expired, &r.Unended, &r.Successor, &r.Reserved)
	if errors.Is(err, pgx.ErrNoRows) {
		return nil, nil
	}
	if err != nil {
		return nil, err
	}
	return &r, nil
}

// Insert implements lease.Store.
func (l *LeaseStore) Insert(ctx context.Context, p *lease.InsertParams) (bool, error) {
	tag, err := l.pool.Exec(ctx, `INSERT INTO `+l.schema+`.leases (shard, owner, term, expires_at)
VALUES ($1, $2, 1, now() + $3 * interval '1 millisecond') ON CONFLICT (shard) DO NOTHING`, p.Shard, p.Owner, p.TTL.Milliseconds())
	return err == nil && tag.RowsAffected() == 1, err
}

// Take implements lease.Store.
func (l *LeaseStore) Take(ctx context.Context, p *lease.TakeParams) (bool, error) {
	tag, err := l.pool.Exec(ctx, `UPDATE `+l.schema+`.leases SET owner = $4, term = term + 1, acquired_at = now(),
  expires_at = now() + $5 * interval '1 millisecond', unended = $6, successor = ''
WHERE shard = $1 AND owner = $2 AND term = $3 AND expires_at < now()`,
		p.Shard, p.Holder, p.Term, p.Owner, p.TTL.Milliseconds(), p.Unended)
	return err == nil && tag.RowsAffected() == 1, err
}

// Renew implements lease.Store.
func (l *LeaseStore) Renew(ctx context.Context, p *lease.RenewParams) (bool, error) {
	tag, err := l.pool.Exec(ctx, `UPDATE `+l.schema+`.leases SET expires_at = now() + $4 * interval '1 millisecond'
WHERE shard = $1 AND owner = $2 AND term = $3`, p.Shard, p.Owner, p.Term, p.TTL.Milliseconds())
	return err == nil && tag.RowsAffected() == 1, err
}

// RenewAll implements lease.Store: one statement for every lease of the
// owner.
func (l *LeaseStore) RenewAll(ctx context.Context, p *lease.RenewAllParams) (map[string]bool, error) {
	rows, err := l.pool.Query(ctx, `UPDATE `+l.schema+`.leases s SET expires_at = now() + $2 * interval '1 millisecond'
FROM unnest($3::text[], $4::bigint[]) AS h(shard, term)
WHERE s.shard = h.shard AND s.term = h.term AND s.owner = $1 AND s.expires_at >= now()
RETURNING s.shard`, p.Owner, p.TTL.Milliseconds(), p.Shards, p.Terms)
	if err != nil {
		return nil, err
	}
	shards, err := pgx.CollectRows(rows, pgx.RowTo[string])
	if err != nil {
		return nil, err
	}
	out := make(map[string]bool, len(shards))
	for _, s := range shards {
		out[s] = true
	}
	return out, nil
}

// Expire implements lease.Store: a lease handed to a successor is
// announced on the relay schema's channel (payload LeasePayload), so that
// the successor takes it at once.
func (l *LeaseStore) Expire(ctx context.Context, p *lease.ExpireParams) error {
	_, err := l.pool.Exec(ctx, `WITH e AS (
  UPDATE `+l.schema+`.leases SET expires_at = now() - interval '1 millisecond', successor = $4
  WHERE shard = $1 AND owner = $2 AND term = $3 RETURNING 1)
SELECT pg_notify($5, $6) FROM e WHERE $4 <> ''`, p.Shard, p.Owner, p.Term, p.Successor, l.channel, LeasePayload)
	return err
}

// LeasePayload is the payload of the notification that a lease was handed
// over or a replica left.
const LeasePayload = "lease"

// Census implements lease.Store: the heartbeat, the read of the replicas
// and the removal of those gone for an hour are one statement; a replica's
// first census is announced (payload LeasePayload), so that the others
// make room for it at once. A replica has a session while one carries its
// ApplicationName.
func (l *LeaseStore) Census(ctx context.Context, p *lease.CensusParams) ([]lease.Replica, error) {
	rows, err := l.pool.Query(ctx, `WITH beat AS (
  INSERT INTO `+l.schema+`.replicas AS r (owner, expires_at) VALUES ($1, now() + $2 * interval '1 millisecond')
  ON CONFLICT (owner) DO UPDATE SET expires_at = EXCLUDED.expires_at
  RETURNING owner, expires_at),
gone AS (DELETE FROM `+l.schema+`.replicas WHERE expires_at < now() - interval '1 hour')
SELECT o.owner, (extract(epoch FROM o.expires_at - now()) * 1000000)::bigint,
  o.owner = $1 OR EXISTS (SELECT 1 FROM pg_stat_activity a WHERE a.application_name = left('outbox-relay ' || o.owner, 63)),
  (SELECT count(*) FROM `+l.schema+`.leases s WHERE s.shard = ANY($3) AND (s.owner = o.owner AND s.expires_at >= now()
    OR s.successor = o.owner AND s.expires_at < now() AND s.expires_at > now() - $4 * interval '1 millisecond'))
FROM (SELECT owner, expires_at FROM beat UNION ALL
  SELECT owner, expires_at FROM `+l.schema+`.replicas WHERE owner <> $1) o`,
		p.Owner, p.TTL.Milliseconds(), p.Shards, p.Reserve.Milliseconds())
	if err != nil {
		return nil, fmt.Errorf("census of the replicas: %w", err)
	}
	var (
		out  []lease.Replica
		r    lease.Replica
		left int64
	)
	_, err = pgx.ForEachRow(rows, []any{&r.Owner, &left, &r.Session, &r.Holds}, func() error {
		r.Left = time.Duration(left) * time.Microsecond
		out = append(out, r)
		return nil
	})
	if err != nil {
		return nil, fmt.Errorf("census of the replicas: %w", err)
	}
	if !l.announced.Load() {
		if _, err := l.pool.Exec(ctx, "SELECT pg_notify($1, $2)", l.channel, LeasePayload); err != nil {
			return nil, fmt.Errorf("announce this replica: %w", err)
		}
		l.announced.Store(true)
	}
	return out, nil
}

// Leave implements lease.Store, and tells the other replicas.
func (l *LeaseStore) Leave(ctx context.Context, p *lease.LeaveParams) error {
	_, err := l.pool.Exec(ctx, `WITH d AS (DELETE FROM `+l.schema+`.replicas WHERE owner = $1 RETURNING 1)
SELECT pg_notify($2, $3) FROM d`, p.Owner, l.channel, LeasePayload)
	if err != nil {
		return fmt.Errorf("leave the replicas: %w", err)
	}
	return nil
}

// Ended implements lease.Store.
func (l *LeaseStore) Ended(ctx context.Context, p *lease.EndedParams) error {
	_, err := l.pool.Exec(ctx, `UPDATE `+l.schema+`.leases SET unended = '' WHERE shard = $1 AND owner = $2 AND term = $3`,
		p.Shard, p.Owner, p.Term)
	return err
}

// Alive implements lease.Store: an owner is alive while a session carries
// its ApplicationName.
func (l *LeaseStore) Alive(ctx context.Context, p *lease.AliveParams) (bool, error) {
	var alive bool
	err := l.pool.QueryRow(ctx, "SELECT EXISTS (SELECT 1 FROM pg_stat_activity WHERE application_name = $1)",
		ApplicationName(p.Owner)).Scan(&alive)
	return alive, err
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

// EndOwner implements lease.Store: it terminates every session of the
// owner that has a transaction open holding a lock on the table (a role may
// end its own role's sessions), then waits until they are gone. A session it
// may not end (run by another role) is waited for instead, and said so in
// the error passed to p.Warn. It returns only when no such session is left,
// or when ctx ends: the new owner claims nothing before.
func (l *LeaseStore) EndOwner(ctx context.Context, p *lease.EndOwnerParams) error {
	for {
		rows, err := l.pool.Query(ctx, `SELECT a.pid FROM pg_stat_activity a
WHERE a.application_name = $1 AND a.pid <> pg_backend_pid()
  AND (a.xact_start IS NOT NULL OR a.state IS NULL)
  AND EXISTS (SELECT 1 FROM pg_locks k WHERE k.pid = a.pid AND k.relation = to_regclass($2))`, ApplicationName(p.Owner), p.Table)
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
			if _, err := l.pool.Exec(ctx, "SELECT pg_terminate_backend($1)", pid); err != nil && p.Warn != nil && ctx.Err() == nil {
				p.Warn(fmt.Errorf("end the previous owner's session %d: %w; waiting for it instead", pid, err))
			}
		}
		select {
		case <-ctx.Done():
			return ctx.Err()
		case <-time.After(50 * time.Millisecond):
		}
	}
}
