package relay

import (
	"context"
	"time"

	"github.com/outbox-relay/outbox-relay/internal/metrics"
	"github.com/outbox-relay/outbox-relay/internal/source"
)

// complete commits one batch's outcome (or releases it when the shutdown
// deadline has passed), then fences keys that must wait and frees the
// batch's keys. Batches complete in claim order.
func (w *Worker) complete(hard context.Context, f *inflight) {
	<-f.published
	var err error
	if hard.Err() != nil {
		err = errReleased
		_ = f.batch.Release(context.Background())
	} else if err = f.batch.Complete(hard, f.outcome); err != nil {
		w.log.Error("complete batch failed; its rows return to the pending set", "err", err, "rows", len(f.rows))
	}

	var fenceKeys []string
	if w.o.Ordering {
		if err != nil {
			for i := range f.rows {
				fenceKeys = append(fenceKeys, f.rows[i].OrderKey)
			}
		} else {
			for _, r := range f.outcome.Retry {
				fenceKeys = append(fenceKeys, f.rows[r.Index].OrderKey)
			}
			for _, i := range f.deferred {
				fenceKeys = append(fenceKeys, f.rows[i].OrderKey)
			}
		}
	}
	w.mu.Lock()
	if len(fenceKeys) > 0 {
		// Claims started up to now may hold later rows of these keys and
		// could not see this commit: they defer them.
		seq := w.claimSeq.Load()
		for _, k := range fenceKeys {
			w.fence[k] = seq
		}
		w.fenceLog = append(w.fenceLog, fenceEntry{seq: seq, keys: fenceKeys})
	}
	// Fences that only concern batches up to this one are spent.
	for len(w.fenceLog) > 0 && w.fenceLog[0].seq <= f.seq {
		e := w.fenceLog[0]
		for _, k := range e.keys {
			if w.fence[k] == e.seq {
				delete(w.fence, k)
			}
		}
		w.fenceLog = w.fenceLog[1:]
	}
	if w.o.Ordering {
		for i := range f.rows {
			if k := f.rows[i].OrderKey; w.lastByKey[k] == f {
				delete(w.lastByKey, k)
			}
		}
	}
	w.mu.Unlock()
	close(f.done)
	if m := w.o.Metrics; m != nil {
		m.InflightBatches.Dec()
	}
	if err == nil {
		w.account(f)
	}
}

// account updates metrics and the counters recorded in relay_state.
func (w *Worker) account(f *inflight) {
	o := f.outcome
	now := time.Now()
	if m := w.o.Metrics; m != nil {
		m.Published.Add(float64(len(o.Published)))
		m.Retried.Add(float64(len(o.Retry)))
		m.Deferred.Add(float64(len(f.deferred)))
		for _, d := range o.Dead {
			reason := metrics.ReasonTerminal
			if d.Exhausted {
				reason = metrics.ReasonExhausted
			}
			m.DeadLettered(reason).Inc()
		}
		m.BatchDuration.Observe(now.Sub(f.claimed).Seconds())
		for _, i := range o.Published {
			if c := f.rows[i].CreatedAt; !c.IsZero() {
				m.CommitToPublish.Observe(now.Sub(c).Seconds())
			}
		}
	}
	if f.violation > 0 {
		w.log.Error("sink delivered rows after an earlier row of their key failed", "rows", f.violation)
	}
	if len(o.Dead) > 0 {
		for _, d := range o.Dead {
			w.log.Warn("event dead-lettered", "event_id", f.rows[d.Index].ID, "attempts", d.Attempts, "reason", d.Reason)
		}
	}
	w.statsMu.Lock()
	w.stats.Published += int64(len(o.Published))
	w.stats.Retried += int64(len(o.Retry))
	w.stats.DeadLettered += int64(len(o.Dead))
	if len(o.Published) > 0 {
		w.stats.LastPublishedID = f.rows[o.Published[len(o.Published)-1]].ID
	}
	w.statsMu.Unlock()
}

func (w *Worker) statsLoop(ctx context.Context) {
	t := time.NewTicker(w.o.StatsInterval)
	defer t.Stop()
	for {
		select {
		case <-ctx.Done():
			return
		case <-t.C:
			w.flushStats(ctx)
		}
	}
}

// flushStats adds the counters to relay_state and refreshes the gauges.
func (w *Worker) flushStats(ctx context.Context) {
	ctx, cancel := context.WithTimeout(ctx, 10*time.Second)
	defer cancel()
	w.statsMu.Lock()
	st := w.stats
	w.stats = source.Stats{}
	w.statsMu.Unlock()
	g, err := w.o.Store.RecordStats(ctx, st)
	if err != nil {
		w.log.Warn("record relay state", "err", err)
		w.statsMu.Lock() // keep the counts for the next try
		w.stats.Published += st.Published
		w.stats.Retried += st.Retried
		w.stats.DeadLettered += st.DeadLettered
		if w.stats.LastPublishedID == "" {
			w.stats.LastPublishedID = st.LastPublishedID
		}
		w.statsMu.Unlock()
		return
	}
	if m := w.o.Metrics; m != nil {
		m.OldestPendingAge.Set(g.Backlog.OldestAge.Seconds())
		m.PendingEvents.Set(float64(g.Backlog.Pending))
		m.FailedEvents.Set(float64(g.DeadLetters))
	}
}
