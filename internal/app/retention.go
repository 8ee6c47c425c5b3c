package app

import (
	"context"
	"errors"
	"time"

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
			res, err := a.purge(ctx, s, r.OlderThan.D(), r.IncludeDead)
			switch {
			case ctx.Err() != nil:
				return
			case errors.Is(err, postgres.ErrNoPrivilege), errors.Is(err, mysql.ErrNoPrivilege):
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

// purge runs one retention pass over a source, by its database's driver.
func (a *App) purge(ctx context.Context, s *Source, olderThan time.Duration, includeDead bool) (postgres.PurgeResult, error) {
	if s.MySQL != nil {
		res, err := mysql.Purge(ctx, s.MySQL.DB, mysql.PurgeParams{
			Source: s.Name, Table: s.MySQL.Table, RelayDatabase: a.cfg.RelaySchema, Layout: s.Layout,
			OlderThan: olderThan, IncludeDead: includeDead, Pause: retentionPause,
		})
		return postgres.PurgeResult{Published: res.Published, Dead: res.Dead, FailedEvents: res.FailedEvents, Audit: res.Audit,
			RetryState: res.RetryState, Batches: res.Batches, KeptByLayout: res.KeptByLayout}, err
	}
	return postgres.Purge(ctx, s.Pool, postgres.PurgeParams{
		Source: s.Name, Table: s.Table, RelaySchema: a.cfg.RelaySchema, Layout: s.Layout,
		OlderThan: olderThan, IncludeDead: includeDead, Pause: retentionPause,
	})
}
