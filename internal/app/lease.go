package app

import (
	"context"
	"time"

	"github.com/outbox-relay/outbox-relay/internal/relay"
	"github.com/outbox-relay/outbox-relay/internal/source"
	"github.com/outbox-relay/outbox-relay/internal/source/postgres"
)

// leaseStore grants sources to one relay process at a time (see
// postgres.Leases).
type leaseStore interface {
	Acquire(ctx context.Context, shard string, ttl time.Duration) (*source.Lease, error)
	Renew(ctx context.Context, l *source.Lease, ttl time.Duration) (bool, error)
	Release(ctx context.Context, l *source.Lease) error
	// WaitForOwner returns once owner has no transaction open.
	WaitForOwner(ctx context.Context, owner string) error
}

// settler is a store that can wait, after a hand-over, until the previous
// owner's claims are over (see mysql.Store.Settle).
type settler interface {
	Settle(ctx context.Context, n int, timeout time.Duration) error
}

// leasesFor returns the lease table of the source's database.
func (a *App) leasesFor(s *Source) leaseStore {
	if s.MySQL != nil {
		return a.mysqlLeases(s.Config.Database)
	}
	return postgres.NewLeases(s.Pool, a.cfg.RelaySchema, a.owner)
}

// runLeased relays a source only while this process holds its lease. A
// replica that cannot get the lease stands by and retries every third of the
// TTL; the holder renews at the same pace and, when a renewal fails or
// finds the lease taken, stops claiming and finishes its batches. After a
// hand-over the new holder first waits until the previous holder has no
// transaction open, so their batches never overlap: per-key order holds
// through the hand-over.
func (a *App) runLeased(ctx context.Context, s *Source, r *runningSource, build func() *relay.Worker) {
	ttl := a.cfg.LeaseTTL.D()
	leases := a.leasesFor(s)
	log := a.log.With("source", s.Name)
	standby := false
	for ctx.Err() == nil {
		l, err := leases.Acquire(ctx, s.Name, ttl)
		if err != nil || l == nil {
			if err != nil {
				log.Warn("acquire lease", "err", err)
			} else if !standby {
				log.Info("another replica holds this source; standing by")
			}
			standby = true
			sleepCtx(ctx, ttl/3)
			continue
		}
		standby = false
		if l.PreviousOwner != "" {
			log.Info("took over the source", "previous_owner", l.PreviousOwner, "term", l.Term)
			wait, cancel := context.WithTimeout(ctx, ttl)
			if err := leases.WaitForOwner(wait, l.PreviousOwner); err != nil && ctx.Err() == nil {
				log.Warn("previous owner still has transactions open; going ahead", "err", err)
			}
			cancel()
			if st, ok := s.Store.(settler); ok {
				// The rows the previous owner's batches may still hold are
				// the first few batches' worth of pending rows.
				n := max(s.Config.BatchSize, 1) * max(s.Config.Pipeline, 1) * 2
				if err := st.Settle(ctx, n, ttl); err != nil && ctx.Err() == nil {
					log.Warn("rows of the previous owner still locked; going ahead", "err", err)
				}
			}
		}
		w := build()
		r.set(w)
		wctx, stop := context.WithCancel(ctx)
		renewed := make(chan struct{})
		go func() {
			defer close(renewed)
			a.renew(wctx, leases, l, ttl, stop)
		}()
		retained := a.startRetention(wctx, s)
		_ = w.Run(wctx)
		stop()
		<-renewed
		<-retained
		r.set(nil)
		if ctx.Err() != nil {
			rctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), 5*time.Second)
			if err := leases.Release(rctx, l); err != nil {
				log.Warn("release lease", "err", err)
			}
			cancel()
			return
		}
	}
}

// renew keeps the lease until ctx ends; it calls lost when the lease is gone
// or could not be renewed for half its TTL.
func (a *App) renew(ctx context.Context, leases leaseStore, l *source.Lease, ttl time.Duration, lost func()) {
	t := time.NewTicker(ttl / 3)
	defer t.Stop()
	last := time.Now()
	for {
		select {
		case <-ctx.Done():
			return
		case <-t.C:
		}
		ok, err := leases.Renew(ctx, l, ttl)
		switch {
		case err == nil && ok:
			last = time.Now()
		case err == nil:
			a.log.Warn("lease lost to another replica; stopping", "source", l.Shard, "term", l.Term)
			lost()
			return
		case time.Since(last) > ttl/2:
			a.log.Error("lease could not be renewed; stopping", "source", l.Shard, "err", err)
			lost()
			return
		}
	}
}

func sleepCtx(ctx context.Context, d time.Duration) {
	t := time.NewTimer(d)
	defer t.Stop()
	select {
	case <-ctx.Done():
	case <-t.C:
	}
}
