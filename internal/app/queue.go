package app

import (
	"context"
	"errors"
	"time"

	"github.com/outbox-relay/outbox-relay/internal/source/driver"
)

// startQueueMaintenance runs, while this process holds the source's lease,
// the reaper of a queue every reaper interval, and reads its gauges (stuck
// dispatches, sequence gaps) at each stats interval, logging each gap when
// it appears. It returns a channel closed when it stops.
func (a *App) startQueueMaintenance(ctx context.Context, s *Source) <-chan struct{} {
	done := make(chan struct{})
	q, ok := s.Store.(driver.Reaper)
	if !ok {
		close(done)
		return done
	}
	go func() {
		defer close(done)
		log := a.log.With("source", s.Name)
		m := a.metrics.Queue(s.Name)
		timeout, interval := s.Config.Reaper.Timeout.D(), s.Config.Reaper.Interval.D()
		every := a.statsInterval
		if every <= 0 {
			every = 15 * time.Second
		}
		every = min(every, interval)
		var lastReap time.Time
		seen := map[driver.Gap]bool{}
		for {
			if time.Since(lastReap) >= interval {
				lastReap = time.Now()
				zs, err := q.Reap(ctx, timeout)
				if ctx.Err() != nil {
					return
				}
				if err != nil {
					log.Warn("reaper failed", "err", err)
				}
				for _, z := range zs {
					log.Warn("zombie dispatch put back: no outcome within the reaper's timeout",
						"id", z.ID, "participant", z.Participant, "sequence", z.Sequence, "timeout", timeout)
				}
			}
			stuck, err := q.Stuck(ctx, timeout)
			if err == nil {
				m.Stuck.Set(float64(stuck))
			}
			gaps, gerr := q.Gaps(ctx)
			if gerr == nil {
				m.Gaps.Set(float64(len(gaps)))
				now := map[driver.Gap]bool{}
				for _, gp := range gaps {
					now[gp] = true
					if !seen[gp] {
						log.Error("participant held by a gap in its sequence: its next dispatch waits for the missing numbers",
							"participant", gp.Participant, "missing_from", gp.Last+1, "missing_to", gp.Next-1, "waiting", gp.Next)
					}
				}
				seen = now
			}
			if err := errors.Join(err, gerr); err != nil && ctx.Err() == nil {
				log.Warn("queue gauges", "err", err)
			}
			sleepCtx(ctx, every)
			if ctx.Err() != nil {
				return
			}
		}
	}()
	return done
}
