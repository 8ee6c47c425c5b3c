package app

import (
	"context"
	"errors"
	"time"

	"github.com/outbox-relay/outbox-relay/internal/source"
	"github.com/outbox-relay/outbox-relay/internal/source/mysql"
	"github.com/outbox-relay/outbox-relay/internal/source/postgres"
)

// retentionPause is the pause between a periodic retention's batches.
const retentionPause = 50 * time.Millisecond

// startRetention applies the source's retention (sources[].retention) while
// ctx lasts: once at once, then every interval. runLeased calls it while
// this process holds the source's lease, so one replica does it. The
// returned channel is closed when it has stopped.
func (a *App) startRetention(ctx context.Context, s *Source) <-chan struct{} {
	done := make(chan struct{})
	r := s.Config.Retention
	if r == nil {
		close(done)
		return done
	}
	go func() {
		defer close(done)
		log := a.log.With("source", s.Name)
		interval := r.Interval.D()
		if interval <= 0 {
			interval = time.Hour
		}
		for {
			start := time.Now()
			res, err := a.Purge(ctx, s, source.PurgeOptions{OlderThan: r.OlderThan.D(), IncludeDead: r.IncludeDead, Pause: retentionPause})
			switch {
			case ctx.Err() != nil:
				return
			case errors.Is(err, source.ErrNoPrivilege):
				log.Warn("retention: the relay's role may not delete from the table; grant it DELETE or run the retention command with another role", "err", err)
			case err != nil:
				log.Warn("retention failed", "err", err)
			default:
				log.Info("retention", "deleted_published", res.Published, "deleted_dead", res.Dead,
					"failed_events", res.FailedEvents, "audit", res.Audit, "retry_state", res.RetryState,
					"batches", res.Batches, "took", time.Since(start).Round(time.Millisecond))
			}
			sleepCtx(ctx, interval)
			if ctx.Err() != nil {
				return
			}
		}
	}()
	return done
}

// Purge runs one retention pass over a source's table, by its database's
// driver (see postgres.Purge and mysql.Purge).
func (a *App) Purge(ctx context.Context, s *Source, o source.PurgeOptions) (source.PurgeResult, error) {
	if s.MySQL != nil {
		return mysql.Purge(ctx, s.MySQL.DB, mysql.PurgeParams{
			Source: s.Name, Table: s.MySQL.Table, RelayDatabase: a.cfg.RelaySchema, Layout: s.Layout,
			OlderThan: o.OlderThan, IncludeDead: o.IncludeDead, DryRun: o.DryRun,
			BatchSize: o.BatchSize, Pause: o.Pause, LockTimeout: o.LockTimeout,
		})
	}
	return postgres.Purge(ctx, s.Pool, postgres.PurgeParams{
		Source: s.Name, Table: s.Table, RelaySchema: a.cfg.RelaySchema, Layout: s.Layout,
		OlderThan: o.OlderThan, IncludeDead: o.IncludeDead, DryRun: o.DryRun,
		BatchSize: o.BatchSize, Pause: o.Pause, LockTimeout: o.LockTimeout,
	})
}

// OptimizeReport is a source's table before and after Optimize.
type OptimizeReport struct {
	SizeBefore, SizeAfter int64
	DeadBefore, DeadAfter int64 // PostgreSQL's dead tuples
	Live                  int64
	Took                  time.Duration
	// Rebuilt is set for a table rebuilt (MySQL's OPTIMIZE TABLE), with
	// its unused space before and after instead of dead tuples.
	Rebuilt               bool
	FreeBefore, FreeAfter int64
}

// Optimize vacuums (PostgreSQL) or rebuilds (MySQL) a source's table and
// reports its size before and after.
func (a *App) Optimize(ctx context.Context, s *Source) (OptimizeReport, error) {
	if s.MySQL != nil {
		res, err := mysql.Optimize(ctx, s.MySQL.DB, s.MySQL.Table)
		return OptimizeReport{SizeBefore: res.Before.Total(), SizeAfter: res.After.Total(), Live: res.After.Rows, Took: res.Took,
			Rebuilt: true, FreeBefore: res.Before.FreeBytes, FreeAfter: res.After.FreeBytes}, err
	}
	res, err := postgres.Optimize(ctx, s.Pool, s.Table)
	return OptimizeReport{SizeBefore: res.Before.TotalBytes, SizeAfter: res.After.TotalBytes,
		DeadBefore: res.Before.DeadTuples, DeadAfter: res.After.DeadTuples, Live: res.After.LiveTuples, Took: res.Took}, err
}
