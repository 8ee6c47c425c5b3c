package app

import (
	"testing"
	"time"
)

func TestHistoryKeepsTheLastHour(t *testing.T) {
	h := newHistory(10*time.Second, nil)
	start := time.Unix(1000, 0)
	for i := range 400 {
		h.record(start.Add(time.Duration(i)*10*time.Second), map[string]sample{"orders": {pending: float64(i), oldest: 1, delivered: float64(100 * i)}})
	}
	ps := h.get()["orders"]
	if len(ps) != 360 {
		t.Fatalf("%d points kept, want 360 (an hour at 10 s)", len(ps))
	}
	if ps[0].Pending != 40 || ps[359].Pending != 399 {
		t.Errorf("kept from %v to %v, want the last 360 samples", ps[0].Pending, ps[359].Pending)
	}
	if ps[359].Rate != 10 {
		t.Errorf("rate %v, want 100 events in 10 s = 10/s", ps[359].Rate)
	}
	// A counter that went back (a restart) gives no rate rather than a negative one.
	h.record(start.Add(4010*time.Second), map[string]sample{"orders": {delivered: 5}})
	if r := h.get()["orders"][359].Rate; r != 0 {
		t.Errorf("rate after a reset %v, want 0", r)
	}
}
