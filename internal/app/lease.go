package app

import (
	"context"

	"github.com/outbox-relay/outbox-relay/internal/lease"
	"github.com/outbox-relay/outbox-relay/internal/relay"
	"github.com/outbox-relay/outbox-relay/internal/source/driver"
)

// runLeased relays a source only while this process holds its lease (see
// lease.Leases.Hold): the lease table is its database's, the fence its
// store's, and each term builds a new worker with the source's retention
// and queue maintenance beside it.
func (a *App) runLeased(ctx context.Context, s *Source, r *runningSource, build func() *relay.Worker) {
	ttl := a.cfg.LeaseTTL.D()
	o := lease.HoldOptions{Shard: s.Name, TTL: ttl, Table: s.TableName(), Logger: a.log.With("source", s.Name),
		Standby: r.standby}
	if f, ok := s.Store.(lease.Fenced); ok {
		o.Fence = f.LeaseFence()
	}
	if st, ok := s.Store.(driver.Settler); ok {
		// The rows the previous owner's batches may still hold are the
		// first few batches' worth of pending rows.
		n := max(s.Config.BatchSize, 1) * max(s.Config.Pipeline, 1) * 2
		o.Settle = func(ctx context.Context) error { return st.Settle(ctx, n, ttl) }
	}
	a.leases[s.Config.Database].Hold(ctx, o, func(ctx context.Context) {
		r.holding()
		w := build()
		r.set(w)
		retained := a.startRetention(ctx, s)
		maintained := a.startQueueMaintenance(ctx, s)
		_ = w.Run(ctx)
		<-retained
		<-maintained
		r.set(nil)
		r.released()
	})
}
