package app

import (
	"testing"
	"time"
)

func TestHistoryPoints(t *testing.T) {
	h := newHistory(10*time.Second, nil, nil, nil)
	start := time.Unix(1000, 0)
	var last map[string][]float64
	for i := range 3 {
		got := h.points(start.Add(time.Duration(i)*10*time.Second), map[string]sample{
			"orders":  {database: "main", pending: float64(i), oldest: 1, delivered: float64(100 * i)},
			"tenants": {database: "other", pending: 7},
		})
		last = map[string][]float64{}
		for db, xs := range got {
			for _, x := range xs {
				last[db+"/"+x.Source] = []float64{float64(x.Pending), x.EventsPerSecond}
			}
		}
	}
	if p := last["main/orders"]; p == nil || p[0] != 2 || p[1] != 10 {
		t.Errorf("orders in main: %v, want pending 2 and 100 events in 10 s = 10/s", p)
	}
	if p := last["other/tenants"]; p == nil || p[0] != 7 || p[1] != 0 {
		t.Errorf("tenants in other: %v, want pending 7, no deliveries", p)
	}
	// A counter that went back (a restart) gives no rate rather than a negative one.
	got := h.points(start.Add(40*time.Second), map[string]sample{"orders": {database: "main", delivered: 5}})
	if r := got["main"][0].EventsPerSecond; r != 0 {
		t.Errorf("rate after a reset %v, want 0", r)
	}
}
