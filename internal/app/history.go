package app

import (
	"context"
	"sync"
	"time"

	dto "github.com/prometheus/client_model/go"
)

// historySpan is how far back the console's charts reach; historyEvery
// is their resolution (360 points an hour).
const (
	historySpan  = time.Hour
	historyEvery = 10 * time.Second
)

// point is one sample of a source for the console's charts.
type point struct {
	At            time.Time `json:"at"`
	Pending       float64   `json:"pending"`
	OldestSeconds float64   `json:"oldest_seconds"`
	Rate          float64   `json:"events_per_second"`
}

// history keeps the last hour of samples of each source, in memory.
type history struct {
	mu      sync.Mutex
	max     int
	points  map[string][]point
	lastN   map[string]float64 // delivered count at the previous sample
	lastAt  map[string]time.Time
	every   time.Duration
	samples func() map[string]sample
}

// sample is what the sampler reads of a source now.
type sample struct {
	pending, oldest, delivered float64
}

func newHistory(every time.Duration, samples func() map[string]sample) *history {
	return &history{max: int(historySpan / every), points: map[string][]point{}, lastN: map[string]float64{},
		lastAt: map[string]time.Time{}, every: every, samples: samples}
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
			h.record(now, h.samples())
		}
	}
}

func (h *history) record(now time.Time, s map[string]sample) {
	h.mu.Lock()
	defer h.mu.Unlock()
	for name, v := range s {
		p := point{At: now, Pending: v.pending, OldestSeconds: v.oldest}
		if at, ok := h.lastAt[name]; ok && now.After(at) && v.delivered >= h.lastN[name] {
			p.Rate = (v.delivered - h.lastN[name]) / now.Sub(at).Seconds()
		}
		h.lastN[name], h.lastAt[name] = v.delivered, now
		ps := append(h.points[name], p)
		if len(ps) > h.max {
			ps = ps[len(ps)-h.max:]
		}
		h.points[name] = ps
	}
}

// get returns a copy of every source's samples, oldest first.
func (h *history) get() map[string][]point {
	h.mu.Lock()
	defer h.mu.Unlock()
	out := make(map[string][]point, len(h.points))
	for k, v := range h.points {
		out[k] = append([]point(nil), v...)
	}
	return out
}

// sources samples every source this process relays, from its metrics.
func (a *App) sources() map[string]sample {
	a.mu.Lock()
	names := make([]string, 0, len(a.running))
	for n, r := range a.running {
		if r.active() != nil {
			names = append(names, n)
		}
	}
	a.mu.Unlock()
	out := map[string]sample{}
	for _, n := range names {
		m := a.metrics.Source(n)
		out[n] = sample{pending: value(m.PendingEvents), oldest: value(m.OldestPendingAge), delivered: value(m.Published)}
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
