package app

import (
	"context"
	"errors"
	"fmt"
	"time"

	"github.com/outbox-relay/outbox-relay/internal/source"
	"github.com/outbox-relay/outbox-relay/internal/source/driver"
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
// driver.
func (a *App) Purge(ctx context.Context, s *Source, o source.PurgeOptions) (source.PurgeResult, error) {
	r, err := retainer(a, s)
	if err != nil {
		return source.PurgeResult{}, err
	}
	return r.Purge(ctx, driver.PurgeParams{Source: s.Name, Layout: s.Layout, PurgeOptions: o})
}

// OptimizeReport is a source's table before and after Optimize.
type OptimizeReport = driver.OptimizeReport

// Optimize vacuums (PostgreSQL) or rebuilds (MySQL) a source's table and
// reports its size before and after.
func (a *App) Optimize(ctx context.Context, s *Source) (OptimizeReport, error) {
	r, err := retainer(a, s)
	if err != nil {
		return OptimizeReport{}, err
	}
	return r.Optimize(ctx)
}

func retainer(a *App, s *Source) (driver.Retainer, error) {
	r, ok := s.Table.(driver.Retainer)
	if !ok {
		conf, _ := a.dbConfig(s.Config.Database)
		return nil, fmt.Errorf("the %s driver has no retention", conf.Driver)
	}
	return r, nil
}
