package app

import (
	"context"
	"sync"

	"github.com/outbox-relay/outbox-relay/internal/lease"
	"github.com/outbox-relay/outbox-relay/internal/relay"
	"github.com/outbox-relay/outbox-relay/internal/source/driver"
)

// runLeased relays a shard of a source (the whole source, unless it is
// split) only while this process holds the shard's lease (see
// lease.Balancer.Hold): the lease table is its database's, shared with the
// other replicas through its balancer, the fence its store's, and each term
// builds a new worker on its store, with the source's retention and queue
// maintenance beside the worker of its first shard.
func (a *App) runLeased(ctx context.Context, s *Source, sh Shard, r *runningShard, build func(Shard) *relay.Worker) {
	ttl := a.cfg.LeaseTTL.D()
	name := sh.Bucket.LeaseName(s.Name)
	log := a.log.With("source", s.Name)
	if sh.Bucket.Split() {
		log = log.With("shard", name)
	}
	o := lease.HoldOptions{Shard: name, Table: s.TableName(), Logger: log, Standby: r.standby}
	if f, ok := sh.Store.(lease.Fenced); ok {
		o.Fence = f.LeaseFence()
	}
	if st, ok := sh.Store.(driver.Settler); ok {
		// The rows the previous owner's batches may still hold are the
		// first few batches' worth of pending rows.
		n := max(s.Config.BatchSize, 1) * max(s.Config.Pipeline, 1) * 2
		o.Settle = func(ctx context.Context) error { return st.Settle(ctx, n, ttl) }
	}
	first := sh.Bucket.Index == 0
	a.balancer(s.Config.Database).Hold(ctx, o, func(ctx context.Context) {
		r.holding()
		w := build(sh)
		r.set(w)
		retained, maintained := closed(), closed()
		if first {
			retained = a.startRetention(ctx, s)
			maintained = a.startQueueMaintenance(ctx, s)
		}
		_ = w.Run(ctx)
		<-retained
		<-maintained
		r.set(nil)
		r.released()
	})
}

// balancers start each database's balancer on first use, in the
// database's scope (it stops when the database is let go): it registers
// this process among the replicas and shares the database's sources with
// them; on PostgreSQL a hand-over or a replica leaving or joining wakes it
// at once (NOTIFY on the relay schema's channel).
type balancers struct {
	scope  func(db string) (context.Context, *sync.WaitGroup)
	listen func(db string) driver.Listener // nil when the database does not listen

	mu sync.Mutex
	by map[string]*lease.Balancer
}

// balancer returns database db's balancer, started on first use.
func (a *App) balancer(db string) *lease.Balancer {
	bs := a.balancers
	bs.mu.Lock()
	defer bs.mu.Unlock()
	if b, ok := bs.by[db]; ok {
		return b
	}
	b := lease.NewBalancer(a.leasesOf(db), a.cfg.LeaseTTL.D(), a.log.With("database", db))
	if bs.by == nil {
		bs.by = map[string]*lease.Balancer{}
	}
	bs.by[db] = b
	ctx, wg := bs.scope(db)
	wg.Go(func() { b.Run(ctx) })
	if l := bs.listen(db); l != nil {
		woken := l.SubscribeLeases()
		wg.Go(func() {
			for {
				select {
				case <-ctx.Done():
					return
				case <-woken:
					b.Nudge()
				}
			}
		})
	}
	return b
}

// forget drops database db's balancer (stopped with its scope), so that a
// database of the same name found later gets a new one.
func (bs *balancers) forget(db string) {
	bs.mu.Lock()
	defer bs.mu.Unlock()
	delete(bs.by, db)
}

// closed is a channel closed already: work that never started.
func closed() <-chan struct{} {
	c := make(chan struct{})
	close(c)
	return c
}
