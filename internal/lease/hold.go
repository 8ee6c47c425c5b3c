package lease

import (
	"context"
	"fmt"
	"log/slog"
	"sync"
	"time"
)

// HoldOptions say which shard Hold keeps and how. The lease's TTL is the
// balancer's.
type HoldOptions struct {
	Shard string
	// Table is the shard's table as the Store's EndOwner takes it: the
	// table whose claims a hand-over ends.
	Table string
	// Fence, when not nil, binds the store's claims to the lease for as
	// long as the work runs.
	Fence *Fence
	// Settle, when not nil, waits after a hand-over until the rows the
	// previous owners' claims may still hold are free (see
	// mysql.Store.Settle); an error is logged and it is called again.
	Settle func(ctx context.Context) error
	// Logger receives the holder's transitions (standing by, took over,
	// lost); nil discards them.
	Logger *slog.Logger
	// Standby, when not nil, is told each time the lease could not be had:
	// err is why, nil when another replica holds it.
	Standby func(err error)
}

// Hold runs work while this process holds the shard's lease, and returns
// once ctx ends, handing the lease to the least loaded other live replica
// (or releasing it) so that another replica takes the shard at once. The
// balancer shares the shards among the live replicas (a process alone is
// one of one): the lease is taken only within this process's share and
// handed over when the census says so. A replica that cannot get the lease
// stands by and retries at every census, and at least every third of the
// TTL. The balancer renews the lease with the process's others; when a
// renewal finds it taken or none succeeded for half the TTL, Hold cancels
// work's context: work must then stop claiming and finish its batches,
// whose completions fail (every batch is bound to the term it was claimed
// under, checked in its completing transaction). After a takeover the new
// holder first ends the claims of every owner the lease names as not ended
// (handOver), and work starts only once they are gone, so per-key order
// holds through the hand-over. When work returns on its own, Hold acquires
// the lease again (the same term while it is still this owner's). Run must
// be running for Hold to acquire anything.
func (b *Balancer) Hold(ctx context.Context, o HoldOptions, work func(ctx context.Context)) {
	log := o.Logger
	if log == nil {
		log = slog.New(slog.DiscardHandler)
	}
	l := b.leases
	b.join(o.Shard)
	defer b.part(o.Shard)
	standby, held := false, false
	for ctx.Err() == nil {
		// Taken before the attempt: a census that comes during it (a
		// hand-over to this process) wakes the wait below at once.
		changed := b.Changed()
		ls, err := l.acquireFair(ctx, o.Shard, b.ttl, b)
		if err != nil || ls == nil {
			switch {
			case err != nil:
				log.Warn("acquire lease", "err", err)
			case held:
				// The work stopped on its own (a fenced producer, a
				// failed completion) and the lease is gone meanwhile.
				log.Warn("lease lost to another replica; standing by")
			case !standby:
				log.Info("another replica holds this source; standing by")
			}
			standby, held = true, false
			if o.Standby != nil && ctx.Err() == nil {
				o.Standby(err)
			}
			select {
			case <-ctx.Done():
			case <-changed:
			case <-time.After(b.ttl / 3):
			}
			continue
		}
		standby, held = false, true
		wctx, stop := context.WithCancel(ctx)
		renewed := make(chan struct{})
		successor := ""
		// The history of holdings: "relaying" when the work starts, and
		// "stopped relaying" when the holding ends: at once when the lease
		// is found lost (the work may take a while to wind down, its
		// completions fenced), else once the work has returned, before the
		// lease is handed over or released.
		var endOnce sync.Once
		ended := func() { endOnce.Do(func() { log.Info("stopped relaying", "term", ls.Term) }) }
		// A lease found lost was held at most until its last renewal's
		// TTL ran out (a starved or frozen holder notices late): the log
		// says so, for the history of holdings.
		lost := func(until time.Time) {
			held = false
			endOnce.Do(func() {
				if now := time.Now(); now.Before(until) {
					until = now
				}
				log.Info("stopped relaying", "term", ls.Term, "held_until", until.UTC().Format(time.RFC3339Nano))
			})
			stop()
		}
		h := b.hold(ls)
		go func() {
			defer close(renewed)
			successor = b.keep(wctx, h, log, lost, stop)
		}()
		if ls.PreviousOwner != "" {
			log.Info("took over the source", "previous_owner", ls.PreviousOwner, "term", ls.Term)
		}
		if len(ls.Unended) > 0 {
			l.handOver(wctx, o, ls, log)
		}
		if wctx.Err() == nil {
			if o.Fence != nil {
				o.Fence.Set(ls)
			}
			log.Info("relaying", "term", ls.Term)
			work(wctx)
			ended()
			if o.Fence != nil {
				o.Fence.Set(nil)
			}
		}
		stop()
		<-renewed
		if ctx.Err() != nil {
			successor = b.successor()
		}
		if successor != "" || ctx.Err() != nil {
			rctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), 5*time.Second)
			if err := l.HandOver(rctx, ls, successor); err != nil {
				log.Warn("release lease", "err", err)
			} else if successor != "" {
				log.Info("handed the source over", "successor", successor, "term", ls.Term)
				b.ring(rctx, successor)
			}
			cancel()
			held = false
		}
		b.released(o.Shard)
		if ctx.Err() != nil {
			return
		}
	}
}

// handOver ends the claims of every earlier holder that may still have
// some open (the previous one, and any it had not ended itself before it
// lost the lease) and waits, through o.Settle, until the rows they held are
// free; then it records them ended. It returns when that is done or ctx
// ended (the lease was lost meanwhile, or the process is stopping): the
// next holder then ends them.
func (l *Leases) handOver(ctx context.Context, o HoldOptions, ls *Lease, log *slog.Logger) {
	warn := func(err error) { log.Warn("previous owner's claims", "err", err) }
	for _, owner := range ls.Unended {
		for {
			err := l.EndOwner(ctx, owner, o.Table, warn)
			if err == nil || ctx.Err() != nil {
				break
			}
			warn(err)
			sleepCtx(ctx, time.Second)
		}
	}
	if o.Settle != nil {
		for ctx.Err() == nil {
			err := o.Settle(ctx)
			if err == nil {
				break
			}
			warn(fmt.Errorf("rows of the previous owner still locked: %w", err))
		}
	}
	if ctx.Err() != nil {
		return
	}
	if err := l.Ended(ctx, ls); err != nil {
		warn(err)
	}
}

// keep watches a lease the balancer renews until ctx ends: it calls lost
// when a renewal found the lease taken or none succeeded for half the TTL
// (the trust window), and handing when the census hands the shard over,
// and then returns the successor ("" but for a hand-over).
func (b *Balancer) keep(ctx context.Context, h *holding, log *slog.Logger, lost func(until time.Time), handing func()) string {
	t := time.NewTicker(b.ttl / 12)
	defer t.Stop()
	for {
		select {
		case <-ctx.Done():
			return ""
		case successor := <-h.giveUp:
			handing()
			return successor
		case <-h.lost:
			log.Warn("lease lost to another replica; stopping", "term", h.ls.Term)
			lost(b.renewedAt(h).Add(b.ttl))
			return ""
		case <-t.C:
			if since := time.Since(b.renewedAt(h)); since > b.ttl/2 {
				log.Error("lease could not be renewed; stopping", "unrenewed_for", since.Round(time.Millisecond))
				lost(b.renewedAt(h).Add(b.ttl))
				return ""
			}
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
