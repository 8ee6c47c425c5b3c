package queue

import (
	"context"
	"fmt"
	"time"

	"github.com/jackc/pgx/v5/pgxpool"

	"github.com/outbox-relay/outbox-relay/internal/source"
	"github.com/outbox-relay/outbox-relay/internal/source/driver"
	"github.com/outbox-relay/outbox-relay/internal/source/postgres"
)

// This file is the driver adapter: the queue is a state mode of
// PostgreSQL tables, served through the PostgreSQL driver (see
// postgres.QueueMode).

// Mode is the queue for postgres.NewDriver.
var Mode = postgres.QueueMode{Open: open, Migrate: Migrate}

// open builds the store of a source in state mode queue.
func open(ctx context.Context, pool *pgxpool.Pool, t postgres.Table, relaySchema string, p driver.SourceParams) (source.Store, error) {
	o := Options{Source: p.Source, Table: t, RelaySchema: relaySchema, Layout: p.Layout}
	if p.Metrics != nil {
		st := p.Layout.Queue.Archive.States
		o.Metrics = p.Metrics.Queue(p.Source, st.Dispatching, st.Dispatched, st.Retryable, st.Failed, st.Zombie)
	}
	s, err := New(ctx, pool, o)
	if err != nil {
		return nil, fmt.Errorf("layout.%w", err)
	}
	return reaper{s}, nil
}

// reaper is the queue's store with its maintenance in the driver's types.
type reaper struct{ *Store }

var (
	_ driver.Reaper   = reaper{}
	_ driver.Replayer = reaper{}
)

func (r reaper) Reap(ctx context.Context, timeout time.Duration) ([]driver.Zombie, error) {
	zs, err := r.Store.Reap(ctx, timeout)
	out := make([]driver.Zombie, len(zs))
	for i, z := range zs {
		out[i] = driver.Zombie(z)
	}
	return out, err
}

func (r reaper) Stuck(ctx context.Context, after time.Duration) (int64, error) {
	g, err := r.Store.Gauges(ctx, after)
	return g.StuckDispatching, err
}

func (r reaper) Gaps(ctx context.Context) ([]driver.Gap, error) {
	gs, err := r.Store.Gaps(ctx)
	out := make([]driver.Gap, len(gs))
	for i, g := range gs {
		out[i] = driver.Gap(g)
	}
	return out, err
}
