package bench

import (
	"github.com/prometheus/client_golang/prometheus"
	dto "github.com/prometheus/client_model/go"
)

// RelayView is what the relay's own histograms say of a steady run: where
// an event's commit-to-publish time goes, inside the relay, beside what the
// consumer measured.
type RelayView struct {
	// CommitToAck is the mean time from an event's commit (its created-at,
	// the transaction's start) to its batch's completion, in milliseconds;
	// Within5ms the share of events whose batch completed within 5 ms.
	CommitToAck float64 `json:"commit_to_ack_ms"`
	Within5ms   float64 `json:"commit_to_ack_within_5ms"`
	// Claim, Publish and Batch are the mean claim, publish (every sink
	// call of a batch) and claim-to-completion times of a batch, in
	// milliseconds; Batches how many batches the run completed.
	Claim   float64 `json:"claim_ms"`
	Publish float64 `json:"publish_ms"`
	Batch   float64 `json:"batch_ms"`
	Batches uint64  `json:"batches"`
}

// histo is one histogram's count, sum and cumulative bucket counts.
type histo struct {
	count   uint64
	sum     float64
	buckets map[float64]uint64
}

// relayHistos reads the relay's duration histograms, summed over sources.
func relayHistos(reg prometheus.Gatherer) map[string]histo {
	out := map[string]histo{}
	mfs, err := reg.Gather()
	if err != nil {
		return out
	}
	for _, mf := range mfs {
		switch mf.GetName() {
		case "outbox_relay_commit_to_publish_seconds", "outbox_relay_claim_duration_seconds",
			"outbox_relay_publish_duration_seconds", "outbox_relay_batch_duration_seconds":
		default:
			continue
		}
		h := histo{buckets: map[float64]uint64{}}
		for _, m := range mf.GetMetric() {
			addHisto(&h, m.GetHistogram())
		}
		out[mf.GetName()] = h
	}
	return out
}

func addHisto(h *histo, d *dto.Histogram) {
	h.count += d.GetSampleCount()
	h.sum += d.GetSampleSum()
	for _, b := range d.GetBucket() {
		h.buckets[b.GetUpperBound()] += b.GetCumulativeCount()
	}
}

// relayView is what the histograms recorded between before and after.
func relayView(before, after map[string]histo) RelayView {
	mean := func(name string) (float64, uint64) {
		a, b := after[name], before[name]
		n := a.count - b.count
		if n == 0 {
			return 0, 0
		}
		return (a.sum - b.sum) / float64(n) * 1000, n
	}
	var v RelayView
	v.CommitToAck, _ = mean("outbox_relay_commit_to_publish_seconds")
	v.Claim, _ = mean("outbox_relay_claim_duration_seconds")
	v.Publish, _ = mean("outbox_relay_publish_duration_seconds")
	v.Batch, v.Batches = mean("outbox_relay_batch_duration_seconds")
	a, b := after["outbox_relay_commit_to_publish_seconds"], before["outbox_relay_commit_to_publish_seconds"]
	if n := a.count - b.count; n > 0 {
		v.Within5ms = float64(a.buckets[0.005]-b.buckets[0.005]) / float64(n)
	}
	return v
}
