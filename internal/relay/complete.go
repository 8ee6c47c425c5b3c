package relay

import (
	"context"
	"errors"
	"time"

	"github.com/outbox-relay/outbox-relay/internal/metrics"
	"github.com/outbox-relay/outbox-relay/internal/source"
)

// complete commits one batch's outcome (or releases it when the shutdown
// deadline has passed), then tells the order book how the batch ended.
// Batches complete in claim order.
func (w *Worker) complete(hard context.Context, f *inflight) {
	<-f.published
	var err error
	if hard.Err() != nil {
		err = errReleased
		// The shutdown deadline has passed: the rollback gets a moment of
		// its own, not for ever (a dead connection ends the transaction
		// on the server anyway).
		rctx, cancel := context.WithTimeout(context.Background(), releaseTimeout)
		_ = f.batch.Release(rctx)
		cancel()
	} else if err = f.batch.Complete(hard, f.outcome); errors.Is(err, source.ErrLeaseLost) {
		w.log.Warn("lease lost: batch not completed, claims stop", "err", err, "rows", len(f.rows))
		w.stopClaims()
	} else if errors.Is(err, source.ErrAlreadySettled) {
		// The other outcomes are recorded; these rows were dispatched
		// again after the reaper put them back.
		w.log.Warn("outcome recorded after the reaper took the attempt for abandoned: the event was sent again, with the same id", "err", err)
		err = nil
	} else if err != nil && f.txn != 0 {
		// Kafka has the batch, the database does not say so: claiming
		// its rows again would publish them twice. The worker stops; the
		// next takeover marks them from the progress record.
		w.log.Error("complete batch failed after its Kafka transaction committed; stopping to recover", "err", err, "rows", len(f.rows))
		w.stopClaims()
	} else if err != nil {
		w.log.Error("complete batch failed; its rows return to the pending set", "err", err, "rows", len(f.rows))
	}
	if err == nil && f.txn != 0 {
		w.o.Txn.Confirm(f.turn.producer, f.txn)
	}
	if f.unknown {
		w.stopClaims()
	}
	select {
	case w.freed <- struct{}{}:
	default:
	}
	if f.ticket != nil {
		w.book.Finish(f.ticket, f.held, err == nil, time.Now())
	}
	if m := w.o.Metrics; m != nil {
		m.InflightBatches.Dec()
	}
	if err == nil {
		w.account(f)
	}
}

// releaseTimeout bounds giving a batch back after the shutdown deadline.
const releaseTimeout = 2 * time.Second

// account updates metrics and the counters recorded in relay_state.
func (w *Worker) account(f *inflight) {
	o := f.outcome
	now := time.Now()
	if m := w.o.Metrics; m != nil {
		m.Published.Add(float64(len(o.Published)))
		m.Retried.Add(float64(len(o.Retry)))
		m.Deferred.Add(float64(f.holds))
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
		w.log.Error("sink delivered rows after an earlier row of their key was left pending", "rows", f.violation)
	}
	if len(o.Dead) > 0 {
		for _, d := range o.Dead {
			w.log.Warn("event dead-lettered", "event_id", f.rows[d.Index].ID, "attempts", d.Attempts, "reason", d.Reason)
		}
	}
	w.statsMu.Lock()
	// Between the stats' exact counts, the backlog shrinks by what each
	// batch takes out of the pending set.
	w.taken += int64(len(o.Published) + len(o.Dead))
	w.pending = max(w.pending-int64(len(o.Published)+len(o.Dead)), 0)
	if m := w.o.Metrics; m != nil {
		m.PendingEvents.Set(float64(w.pending))
	}
	w.stats.Published += int64(len(o.Published))
	w.delivered += int64(len(o.Published))
	w.stats.Retried += int64(len(o.Retry))
	w.stats.DeadLettered += int64(len(o.Dead))
	if len(o.Published) > 0 {
		w.stats.LastPublishedID = f.rows[o.Published[len(o.Published)-1]].ID
	}
	w.statsMu.Unlock()
}

func (w *Worker) statsLoop(ctx context.Context) {
	w.flushStats(ctx) // the backlog's gauges from the start
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
	st.Live = w.live(time.Now())
	takenBefore := w.taken
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
	w.setOldest(g.Backlog.OldestAge)
	w.statsMu.Lock()
	// Batches committed while the count ran may be in it, or not: take
	// them off, so that the gauge errs low only until the next count.
	w.pending = max(g.Backlog.Pending-(w.taken-takenBefore), 0)
	pending := w.pending
	w.statsMu.Unlock()
	if m := w.o.Metrics; m != nil {
		m.PendingEvents.Set(float64(pending))
		m.FailedEvents.Set(float64(g.DeadLetters))
		if g.Slot != nil {
			m.Slot(g.Slot.RetainedBytes, g.Slot.LagBytes)
		}
	}
}

// rateWindow is the span the delivery rate is measured over.
const rateWindow = time.Minute

// deliveredAt is the count of delivered events at a time.
type deliveredAt struct {
	at time.Time
	n  int64
}

// live describes the source now, for relay_state. Call with statsMu held.
func (w *Worker) live(now time.Time) *source.Live {
	w.samples = append(w.samples, deliveredAt{now, w.delivered})
	for len(w.samples) > 2 && now.Sub(w.samples[1].at) >= rateWindow {
		w.samples = w.samples[1:]
	}
	l := &source.Live{Owner: w.o.Owner, Sinks: map[string]string{}}
	if first := w.samples[0]; now.Sub(first.at) > 0 {
		l.Rate = float64(w.delivered-first.n) / now.Sub(first.at).Seconds()
	}
	if last := w.LastPoll(); last.After(w.started) {
		l.LastClaim = last
	}
	for _, t := range w.targets {
		if s, ok := t.sink.(interface{ Status() string }); ok {
			l.Sinks[t.sinkName] = s.Status()
		} else {
			l.Sinks[t.sinkName] = "ok"
		}
	}
	return l
}
