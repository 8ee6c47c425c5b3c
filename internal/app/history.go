package app

import (
	"context"
	"fmt"
	"log/slog"
	"time"

	dto "github.com/prometheus/client_model/go"

	"github.com/outbox-relay/outbox-relay/internal/config"
	"github.com/outbox-relay/outbox-relay/internal/source"
	"github.com/outbox-relay/outbox-relay/internal/source/driver"
)

// historyEvery is the resolution of the console's charts, which reach
// back source.SampleSpan (360 points an hour).
const historyEvery = 10 * time.Second

// point is one sample of a source for the console's charts.
type point struct {
	At            time.Time `json:"at"`
	Pending       float64   `json:"pending"`
	OldestSeconds float64   `json:"oldest_seconds"`
	Rate          float64   `json:"events_per_second"`
}

// history samples the sources this process relays every `every` and
// writes the samples to their databases (the relay schema's
// source_samples, pruned to the last hour), from which any replica reads
// them: the charts are the same whichever replica serves the console.
type history struct {
	every   time.Duration
	samples func() map[string]sample
	write   func(ctx context.Context, db string, xs []source.Sample) error
	log     *slog.Logger

	lastN  map[string]float64 // delivered count at the previous sample
	lastAt map[string]time.Time
}

// sample is what the sampler reads of a source now.
type sample struct {
	database                   string
	pending, oldest, delivered float64
}

func newHistory(every time.Duration, samples func() map[string]sample,
	write func(ctx context.Context, db string, xs []source.Sample) error, log *slog.Logger) *history {
	return &history{every: every, samples: samples, write: write, log: log,
		lastN: map[string]float64{}, lastAt: map[string]time.Time{}}
}

// run samples every h.every until ctx ends.
func (h *history) run(ctx context.Context) {
	t := time.NewTicker(h.every)
	defer t.Stop()
	for {
		select {
		case <-ctx.Done():
			return
		case now := <-t.C:
			for db, xs := range h.points(now, h.samples()) {
				if err := h.write(ctx, db, xs); err != nil && ctx.Err() == nil {
					h.log.Warn("record the console's samples", "database", db, "err", err)
				}
			}
		}
	}
}

// points turns the readings s at now into samples, by database: the rate
// is the deliveries since the previous reading of the same source.
func (h *history) points(now time.Time, s map[string]sample) map[string][]source.Sample {
	out := map[string][]source.Sample{}
	for name, v := range s {
		p := source.Sample{Source: name, Pending: int64(v.pending), OldestSeconds: v.oldest}
		if at, ok := h.lastAt[name]; ok && now.After(at) && v.delivered >= h.lastN[name] {
			p.EventsPerSecond = (v.delivered - h.lastN[name]) / now.Sub(at).Seconds()
		}
		h.lastN[name], h.lastAt[name] = v.delivered, now
		out[v.database] = append(out[v.database], p)
	}
	return out
}

// readHistory reads every database's samples of the last hour, by source,
// oldest first: those of the configuration and the members of its
// multi-database entries in service (one that stops answering meanwhile
// is left out: its sources say it is down).
func (a *App) readHistory(ctx context.Context) (map[string][]point, error) {
	out := map[string][]point{}
	for _, db := range a.servingNames() {
		k, err := capability[driver.SampleKeeper](a, db, "keep the console's samples")
		if err != nil {
			return nil, err
		}
		xs, err := k.Samples(ctx)
		_, _, member := config.SplitMemberName(db)
		if err != nil && member && ctx.Err() == nil {
			continue
		} else if err != nil {
			return nil, fmt.Errorf("%s: read the console's samples: %w", dbPath(db), err)
		}
		for _, x := range xs {
			if member && !a.belongs(db, x.Source) {
				continue // another member's, in a relay database they share (MySQL)
			}
			out[x.Source] = append(out[x.Source], point{At: x.At, Pending: float64(x.Pending), OldestSeconds: x.OldestSeconds,
				Rate: x.EventsPerSecond})
		}
	}
	return out, nil
}

// writeSamples records xs in database db.
func (a *App) writeSamples(ctx context.Context, db string, xs []source.Sample) error {
	k, err := capability[driver.SampleKeeper](a, db, "keep the console's samples")
	if err != nil {
		return err
	}
	return k.RecordSamples(ctx, xs)
}

// sources samples every source this process relays, from its metrics.
func (a *App) sources() map[string]sample {
	a.mu.Lock()
	type held struct{ name, db string }
	var names []held
	for n, r := range a.running {
		if r.active() != nil {
			names = append(names, held{n, r.cs.Database})
		}
	}
	a.mu.Unlock()
	out := map[string]sample{}
	for _, n := range names {
		m := a.metrics.Source(n.name)
		out[n.name] = sample{database: n.db, pending: value(m.PendingEvents), oldest: value(m.OldestPendingAge),
			delivered: value(m.Published)}
	}
	return out
}

// value reads a gauge's or a counter's current value.
func value(c interface{ Write(*dto.Metric) error }) float64 {
	var m dto.Metric
	if c.Write(&m) != nil {
		return 0
	}
	if g := m.GetGauge(); g != nil {
		return g.GetValue()
	}
	return m.GetCounter().GetValue()
}
