// Package metrics defines the Prometheus metrics the relay exports.
//
// Every metric carries a "source" label: the name of the configured outbox
// source, so that one process relaying several outboxes reports each one
// separately. Dead-lettered events also carry a "reason" label, one of the
// Reason constants.
//
// Counters:
//
//	outbox_relay_events_published_total{source}           events delivered to the sink
//	outbox_relay_events_retried_total{source}              failed publishes scheduled for another attempt
//	outbox_relay_events_dead_lettered_total{source,reason} events moved to the dead-letter table
//	outbox_relay_events_deferred_total{source}             events held back (e.g. behind an earlier event of the same key)
//	outbox_relay_claim_batches_total{source}               batches claimed from the outbox
//	outbox_relay_notify_wakeups_total{source}              wake-ups caused by a database notification
//	outbox_relay_claim_errors_total{source}                claim queries that failed
//
// Gauges:
//
//	outbox_relay_oldest_pending_age_seconds{source} age of the oldest event not yet published
//	outbox_relay_pending_events{source}             events waiting to be published
//	outbox_relay_failed_events{source}              events in the dead-letter table (its depth)
//	outbox_relay_inflight_batches{source}           batches claimed but not yet committed
//	outbox_relay_wal_retained_bytes{source}         WAL the source's replication slot keeps (capture wal)
//	outbox_relay_wal_slot_lag_bytes{source}         WAL written since the slot's confirmed position (capture wal)
//	outbox_relay_last_claim_timestamp_seconds{source} Unix time of the latest successful claim query
//	outbox_relay_sink_circuit_state{sink}           0 closed, 1 half-open, 2 open
//	outbox_relay_source_relaying{source}            1 while this process relays the source, else 0
//	outbox_relay_source_state{source,state,cause}   1: the source's state here and why it does not relay (see StateCollector)
//
// Histograms:
//
//	outbox_relay_batch_duration_seconds{source}    from claiming a batch to committing its outcome
//	outbox_relay_publish_duration_seconds{source}  one publish call to the sink
//	outbox_relay_claim_duration_seconds{source}    one claim query
//	outbox_relay_batch_size{source}                events per claimed batch
//	outbox_relay_commit_to_publish_seconds{source} age of an event when it was published
//
// Sources in state mode queue (payment dispatch) also export:
//
//	outbox_relay_queue_attempts_total{source,state}     outcomes appended to the archive, by state
//	outbox_relay_queue_reaper_requeues_total{source}    zombie dispatches put back by the reaper
//	outbox_relay_queue_stuck_dispatching{source}        dispatches without an outcome past the reaper's timeout
//	outbox_relay_queue_sequence_gaps{source}            participants held by a hole in their sequence
//	outbox_relay_dispatch_latency_seconds{source}       one dispatch, request to answer (histogram)
package metrics

import (
	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/promauto"
	dto "github.com/prometheus/client_model/go"
)

const namespace = "outbox_relay"

// Values of the "reason" label of outbox_relay_events_dead_lettered_total.
const (
	// ReasonTerminal: the sink rejected the event in a way retrying cannot fix.
	ReasonTerminal = "terminal"
	// ReasonExhausted: the event failed on every attempt it was allowed.
	ReasonExhausted = "exhausted"
)

// DurationBuckets are the histogram buckets, in seconds, for durations and
// ages: from a millisecond to ten minutes.
var DurationBuckets = []float64{
	.001, .0025, .005, .01, .025, .05, .1, .25, .5,
	1, 2.5, 5, 10, 30, 60, 120, 300, 600,
}

// SizeBuckets are the histogram buckets for batch sizes, in events.
var SizeBuckets = []float64{1, 2, 5, 10, 25, 50, 100, 250, 500, 1000, 2500, 5000}

// Metrics holds the relay's metric vectors. Use Source to get the metrics of
// one source with its label applied.
type Metrics struct {
	Published     *prometheus.CounterVec // {source}
	Retried       *prometheus.CounterVec // {source}
	DeadLettered  *prometheus.CounterVec // {source, reason}
	Deferred      *prometheus.CounterVec // {source}
	ClaimBatches  *prometheus.CounterVec // {source}
	NotifyWakeups *prometheus.CounterVec // {source}
	ClaimErrors   *prometheus.CounterVec // {source}

	OldestPendingAge *prometheus.GaugeVec // {source}, seconds
	LastClaim        *prometheus.GaugeVec // {source}, Unix seconds
	PendingEvents    *prometheus.GaugeVec // {source}
	FailedEvents     *prometheus.GaugeVec // {source}, dead-letter depth
	InflightBatches  *prometheus.GaugeVec // {source}
	WALRetained      *prometheus.GaugeVec // {source}, bytes
	WALLag           *prometheus.GaugeVec // {source}, bytes
	SinkCircuit      *prometheus.GaugeVec // {sink}: 0 closed, 1 half-open, 2 open

	BatchDuration   *prometheus.HistogramVec // {source}, seconds
	PublishDuration *prometheus.HistogramVec // {source}, seconds
	ClaimDuration   *prometheus.HistogramVec // {source}, seconds
	BatchSize       *prometheus.HistogramVec // {source}, events
	CommitToPublish *prometheus.HistogramVec // {source}, seconds

	QueueAttempts       *prometheus.CounterVec   // {source, state}
	QueueReaperRequeues *prometheus.CounterVec   // {source}
	QueueStuck          *prometheus.GaugeVec     // {source}
	QueueGaps           *prometheus.GaugeVec     // {source}
	DispatchLatency     *prometheus.HistogramVec // {source}, seconds
}

// New creates the metrics and registers them with reg. It panics if one of
// them is already registered there, as promauto does. With a nil reg the
// metrics work but are not registered anywhere, which suits tests.
func New(reg prometheus.Registerer) *Metrics {
	f := promauto.With(reg)
	source := []string{"source"}
	counter := func(name, help string, labels ...string) *prometheus.CounterVec {
		return f.NewCounterVec(prometheus.CounterOpts{Namespace: namespace, Name: name, Help: help}, labels)
	}
	gauge := func(name, help string) *prometheus.GaugeVec {
		return f.NewGaugeVec(prometheus.GaugeOpts{Namespace: namespace, Name: name, Help: help}, source)
	}
	histogram := func(name, help string, buckets []float64) *prometheus.HistogramVec {
		return f.NewHistogramVec(prometheus.HistogramOpts{
			Namespace: namespace, Name: name, Help: help, Buckets: buckets,
		}, source)
	}

	return &Metrics{
		Published: counter("events_published_total",
			"Events delivered to the sink.", source...),
		Retried: counter("events_retried_total",
			"Failed publishes scheduled for another attempt.", source...),
		DeadLettered: counter("events_dead_lettered_total",
			"Events moved to the dead-letter table, by reason (terminal or exhausted).", "source", "reason"),
		Deferred: counter("events_deferred_total",
			"Events held back for a later batch.", source...),
		ClaimBatches: counter("claim_batches_total",
			"Batches claimed from the outbox.", source...),
		NotifyWakeups: counter("notify_wakeups_total",
			"Wake-ups caused by a database notification.", source...),
		ClaimErrors: counter("claim_errors_total",
			"Claim queries that failed.", source...),

		OldestPendingAge: gauge("oldest_pending_age_seconds",
			"Age of the oldest event not yet published."),
		LastClaim: gauge("last_claim_timestamp_seconds",
			"Unix time of the latest successful claim query, whether it found rows or not."),
		PendingEvents: gauge("pending_events",
			"Events waiting to be published."),
		FailedEvents: gauge("failed_events",
			"Events in the dead-letter table."),
		InflightBatches: gauge("inflight_batches",
			"Batches claimed but not yet committed."),
		WALRetained: gauge("wal_retained_bytes",
			"WAL the source's replication slot keeps on the server (capture wal): what the server cannot recycle."),
		WALLag: gauge("wal_slot_lag_bytes",
			"WAL written since the source's replication slot's confirmed position (capture wal)."),
		SinkCircuit: f.NewGaugeVec(prometheus.GaugeOpts{Namespace: namespace, Name: "sink_circuit_state",
			Help: "State of the sink's circuit breaker: 0 closed, 1 half-open (probing), 2 open (its rows wait)."}, []string{"sink"}),

		BatchDuration: histogram("batch_duration_seconds",
			"Time from claiming a batch to committing its outcome.", DurationBuckets),
		PublishDuration: histogram("publish_duration_seconds",
			"Time of one publish call to the sink.", DurationBuckets),
		ClaimDuration: histogram("claim_duration_seconds",
			"Time of one claim query.", DurationBuckets),
		BatchSize: histogram("batch_size",
			"Events per claimed batch.", SizeBuckets),
		CommitToPublish: histogram("commit_to_publish_seconds",
			"Age of an event (since its transaction committed) when it was published.", DurationBuckets),

		QueueAttempts: counter("queue_attempts_total",
			"Attempts appended to a queue's archive, by state.", "source", "state"),
		QueueReaperRequeues: counter("queue_reaper_requeues_total",
			"Dispatches left without an outcome that the reaper put back.", source...),
		QueueStuck: gauge("queue_stuck_dispatching",
			"Dispatches without an outcome for longer than the reaper's timeout."),
		QueueGaps: gauge("queue_sequence_gaps",
			"Participants whose next dispatch waits on a sequence number missing from the queue."),
		DispatchLatency: histogram("dispatch_latency_seconds",
			"Time of one dispatch, from the request to the destination's answer.", DurationBuckets),
	}
}

// QueueMetrics are a queue source's own metrics, label applied.
type QueueMetrics struct {
	ReaperRequeues  prometheus.Counter
	Stuck, Gaps     prometheus.Gauge
	DispatchLatency prometheus.Observer
	attempts        *prometheus.CounterVec
}

// Queue returns the queue metrics of the named source, every series at
// zero.
func (m *Metrics) Queue(name string, states ...string) *QueueMetrics {
	q := &QueueMetrics{
		ReaperRequeues:  m.QueueReaperRequeues.WithLabelValues(name),
		Stuck:           m.QueueStuck.WithLabelValues(name),
		Gaps:            m.QueueGaps.WithLabelValues(name),
		DispatchLatency: m.DispatchLatency.WithLabelValues(name),
		attempts:        m.QueueAttempts.MustCurryWith(prometheus.Labels{"source": name}),
	}
	for _, st := range states {
		q.Attempts(st)
	}
	return q
}

// Attempts is the counter of the archive's attempts in state.
func (q *QueueMetrics) Attempts(state string) prometheus.Counter {
	return q.attempts.WithLabelValues(state)
}

// SourceMetrics are the metrics of one source, label already applied.
type SourceMetrics struct {
	Published     prometheus.Counter
	Retried       prometheus.Counter
	Deferred      prometheus.Counter
	ClaimBatches  prometheus.Counter
	NotifyWakeups prometheus.Counter
	ClaimErrors   prometheus.Counter

	OldestPendingAge prometheus.Gauge
	LastClaim        prometheus.Gauge
	PendingEvents    prometheus.Gauge
	FailedEvents     prometheus.Gauge
	InflightBatches  prometheus.Gauge

	BatchDuration   prometheus.Observer
	PublishDuration prometheus.Observer
	ClaimDuration   prometheus.Observer
	BatchSize       prometheus.Observer
	CommitToPublish prometheus.Observer

	deadLettered *prometheus.CounterVec // curried with source; label left: reason
	// The slot's gauges, curried with source: made at the first Slot, so
	// that only sources with a slot export them.
	walRetained, walLag *prometheus.GaugeVec
}

// Slot sets the gauges of the source's replication slot (capture wal).
func (s *SourceMetrics) Slot(retainedBytes, lagBytes int64) {
	s.walRetained.WithLabelValues().Set(float64(retainedBytes))
	s.walLag.WithLabelValues().Set(float64(lagBytes))
}

// Source returns the metrics of the named source. It also creates every
// series of that source at zero (both dead-letter reasons included), so they
// are exported before the first event. Calling it again with the same name
// returns metrics sharing the same series.
func (m *Metrics) Source(name string) *SourceMetrics {
	s := &SourceMetrics{
		Published:     m.Published.WithLabelValues(name),
		Retried:       m.Retried.WithLabelValues(name),
		Deferred:      m.Deferred.WithLabelValues(name),
		ClaimBatches:  m.ClaimBatches.WithLabelValues(name),
		NotifyWakeups: m.NotifyWakeups.WithLabelValues(name),
		ClaimErrors:   m.ClaimErrors.WithLabelValues(name),

		OldestPendingAge: m.OldestPendingAge.WithLabelValues(name),
		LastClaim:        m.LastClaim.WithLabelValues(name),
		PendingEvents:    m.PendingEvents.WithLabelValues(name),
		FailedEvents:     m.FailedEvents.WithLabelValues(name),
		InflightBatches:  m.InflightBatches.WithLabelValues(name),

		BatchDuration:   m.BatchDuration.WithLabelValues(name),
		PublishDuration: m.PublishDuration.WithLabelValues(name),
		ClaimDuration:   m.ClaimDuration.WithLabelValues(name),
		BatchSize:       m.BatchSize.WithLabelValues(name),
		CommitToPublish: m.CommitToPublish.WithLabelValues(name),

		deadLettered: m.DeadLettered.MustCurryWith(prometheus.Labels{"source": name}),
		walRetained:  m.WALRetained.MustCurryWith(prometheus.Labels{"source": name}),
		walLag:       m.WALLag.MustCurryWith(prometheus.Labels{"source": name}),
	}
	s.DeadLettered(ReasonTerminal)
	s.DeadLettered(ReasonExhausted)
	return s
}

// Forget removes every series of the named source: a source this process
// no longer runs (its database was let go) exports nothing, so that no
// stale gauge (an oldest pending age, a backlog) outlives it.
func (m *Metrics) Forget(name string) {
	l := prometheus.Labels{"source": name}
	for _, v := range []interface {
		DeletePartialMatch(prometheus.Labels) int
	}{
		m.Published, m.Retried, m.DeadLettered, m.Deferred, m.ClaimBatches, m.NotifyWakeups, m.ClaimErrors,
		m.OldestPendingAge, m.LastClaim, m.PendingEvents, m.FailedEvents, m.InflightBatches, m.WALRetained, m.WALLag,
		m.BatchDuration, m.PublishDuration, m.ClaimDuration, m.BatchSize, m.CommitToPublish,
		m.QueueAttempts, m.QueueReaperRequeues, m.QueueStuck, m.QueueGaps, m.DispatchLatency,
	} {
		v.DeletePartialMatch(l)
	}
}

// DeadLettered returns the dead-letter counter for reason, normally one of
// ReasonTerminal and ReasonExhausted.
func (s *SourceMetrics) DeadLettered(reason string) prometheus.Counter {
	return s.deadLettered.WithLabelValues(reason)
}

// PublishedTotal is events_published_total summed over its sources, read
// without gathering the whole registry.
func (m *Metrics) PublishedTotal() float64 {
	ch := make(chan prometheus.Metric, 16)
	go func() {
		m.Published.Collect(ch)
		close(ch)
	}()
	total := 0.0
	for pm := range ch {
		var d dto.Metric
		if pm.Write(&d) == nil {
			total += d.GetCounter().GetValue()
		}
	}
	return total
}
