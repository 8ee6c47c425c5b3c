package bench

import (
	"math"
	"testing"

	"github.com/prometheus/client_golang/prometheus"

	"github.com/outbox-relay/outbox-relay/internal/metrics"
)

// TestRelayView: the view counts only what was observed between the two
// readings, summed over sources.
func TestRelayView(t *testing.T) {
	reg := prometheus.NewRegistry()
	m := metrics.New(reg)
	m.CommitToPublish.WithLabelValues("a").Observe(0.100) // before: left out
	before := relayHistos(reg)
	m.CommitToPublish.WithLabelValues("a").Observe(0.002)
	m.CommitToPublish.WithLabelValues("b").Observe(0.004)
	m.CommitToPublish.WithLabelValues("b").Observe(0.009)
	m.BatchDuration.WithLabelValues("a").Observe(0.010)
	m.BatchDuration.WithLabelValues("b").Observe(0.020)
	v := relayView(before, relayHistos(reg))
	near := func(a, b float64) bool { return math.Abs(a-b) < 1e-9 }
	if !near(v.CommitToAck, 5) || !near(v.Within5ms, 2.0/3) {
		t.Errorf("commit to completion %.3f ms, %.3f within 5 ms; want 5 ms and 2/3", v.CommitToAck, v.Within5ms)
	}
	if v.Batches != 2 || !near(v.Batch, 15) {
		t.Errorf("batches %d of %.3f ms; want 2 of 15 ms", v.Batches, v.Batch)
	}
}
