package app

import (
	"context"
	"fmt"
	"log/slog"
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
	// EndOwner ends owner's claims on table and returns once none is
	// left (or ctx ends); what it may not end it waits for, saying so
	// through warn.
	EndOwner(ctx context.Context, owner, table string, warn func(error)) error
	// Ended records that the holder of l ended every owner of l.Unended.
	Ended(ctx context.Context, l *source.Lease) error
}

// fenceOf returns the fence of the source's store: its batches complete only
// while the lease they were claimed under is held (see source.Fence).
func fenceOf(s *Source) *source.Fence {
	if s.MySQL != nil {
		return &s.MySQL.Store.Fence
	}
	if s.PG != nil {
		return &s.PG.Fence
	}
	if s.Queue != nil {
		return &s.Queue.Fence
	}
	return nil
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
// TTL; the holder renews at the same pace from the moment it has the lease
// and, when a renewal fails or finds the lease taken, stops claiming and
// finishes its batches, whose completions then fail: every batch is bound to
// the lease term it was claimed under, checked in its completing
// transaction. After a hand-over the new holder first ends the previous
// holder's claim transactions on the table and claims nothing until they are
// gone, so per-key order holds through the hand-over.
func (a *App) runLeased(ctx context.Context, s *Source, r *runningSource, build func() *relay.Worker) {
	ttl := a.cfg.LeaseTTL.D()
	leases := a.leasesFor(s)
	log := a.log.With("source", s.Name)
	fence := fenceOf(s)
	standby, held := false, false
	for ctx.Err() == nil {
		l, err := leases.Acquire(ctx, s.Name, ttl)
		if err != nil || l == nil {
			switch {
			case err != nil:
				log.Warn("acquire lease", "err", err)
			case held:
				// The worker stopped on its own (a fenced producer, a
				// failed completion) and the lease is gone meanwhile.
				log.Warn("lease lost to another replica; standing by")
			case !standby:
				log.Info("another replica holds this source; standing by")
			}
			standby, held = true, false
			sleepCtx(ctx, ttl/3)
			continue
		}
		standby, held = false, true
		wctx, stop := context.WithCancel(ctx)
		renewed := make(chan struct{})
		go func() {
			defer close(renewed)
			// A loss renew reports is logged there, not again below.
			a.renew(wctx, leases, l, ttl, func() { held = false; stop() })
		}()
		if l.PreviousOwner != "" {
			log.Info("took over the source", "previous_owner", l.PreviousOwner, "term", l.Term)
		}
		if len(l.Unended) > 0 {
			a.endPrevious(wctx, s, leases, l, log)
		}
		if wctx.Err() == nil {
			if fence != nil {
				fence.Set(l)
			}
			w := build()
			r.set(w)
			retained := a.startRetention(wctx, s)
			maintained := a.startQueueMaintenance(wctx, s)
			_ = w.Run(wctx)
			<-retained
			<-maintained
			r.set(nil)
			if fence != nil {
				fence.Set(nil)
			}
		}
		stop()
		<-renewed
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

// endPrevious ends the claims of every earlier holder that may still have
// some open (the previous one, and any it had not ended itself before it
// lost the lease) and, on MySQL, waits until the rows they held are free;
// then it records them ended. It returns when that is done or ctx ended
// (the lease was lost meanwhile, or the process is stopping): the next
// holder then ends them.
func (a *App) endPrevious(ctx context.Context, s *Source, leases leaseStore, l *source.Lease, log *slog.Logger) {
	warn := func(err error) { log.Warn("previous owner's claims", "err", err) }
	for _, owner := range l.Unended {
		for {
			err := leases.EndOwner(ctx, owner, s.TableName(), warn)
			if err == nil || ctx.Err() != nil {
				break
			}
			warn(err)
			sleepCtx(ctx, time.Second)
		}
	}
	if st, ok := s.Store.(settler); ok {
		// The rows the previous owner's batches may still hold are the
		// first few batches' worth of pending rows.
		n := max(s.Config.BatchSize, 1) * max(s.Config.Pipeline, 1) * 2
		for ctx.Err() == nil {
			err := st.Settle(ctx, n, a.cfg.LeaseTTL.D())
			if err == nil {
				break
			}
			warn(fmt.Errorf("rows of the previous owner still locked: %w", err))
		}
	}
	if ctx.Err() != nil {
		return
	}
	if err := leases.Ended(ctx, l); err != nil {
		warn(err)
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
		case ctx.Err() != nil:
			return // the worker stopped: runLeased goes on
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
