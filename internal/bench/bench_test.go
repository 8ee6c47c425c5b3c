package bench

import (
	"context"
	"testing"
	"time"

	"github.com/outbox-relay/outbox-relay/internal/pgtest"
)

// A small run of each workload, so that the benchmark keeps working; the
// figures themselves are never asserted.
func TestWorkloadsRun(t *testing.T) {
	if testing.Short() {
		t.Skip("needs PostgreSQL")
	}
	base := Options{
		DSN: pgtest.AdminDSN(), Rows: 3000, Keys: 50, PayloadBytes: 200, BatchSize: 500, Pipeline: 3,
		Layouts: []string{"delete", "mark"}, Orderings: []bool{true}, Partitions: 4, InProcessBroker: true,
		Rates: []int{200}, RowsPerTx: []int{1, 10}, Duration: 500 * time.Millisecond,
	}
	for _, w := range []string{"drain", "steady", "keys"} {
		t.Run(w, func(t *testing.T) {
			o := base
			o.Workload = w
			rep, err := Run(context.Background(), o)
			if err != nil {
				t.Fatal(err)
			}
			for _, r := range rep.Drain {
				if r.Relay.Events != o.Rows || (w == "drain" && r.Ceiling.Events != o.Rows) {
					t.Errorf("%s %s: relay %d, ceiling %d events, want %d", w, r.Layout, r.Relay.Events, r.Ceiling.Events, o.Rows)
				}
				if w == "keys" && (r.OrderHeld == nil || !*r.OrderHeld) {
					t.Errorf("keys=%d: order not held", r.Keys)
				}
			}
			for _, r := range rep.Rates {
				if r.Received != r.Committed || r.Latency.Count != int64(r.Committed) {
					t.Errorf("%s: committed %d, received %d, latencies %d", w, r.Committed, r.Received, r.Latency.Count)
				}
			}
			if w != "steady" && len(rep.Drain) == 0 || w == "steady" && len(rep.Rates) == 0 {
				t.Fatalf("%s: no results", w)
			}
		})
	}
}
