package metrics

import (
	"slices"
	"strings"
	"testing"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/testutil"
	dto "github.com/prometheus/client_model/go"
)

// touchAll records one value in every metric of s.
func touchAll(s *SourceMetrics) {
	s.Published.Inc()
	s.Retried.Inc()
	s.Deferred.Inc()
	s.ClaimBatches.Inc()
	s.NotifyWakeups.Inc()
	s.ClaimErrors.Inc()
	s.LastClaim.SetToCurrentTime()
	s.DeadLettered(ReasonTerminal).Inc()
	s.OldestPendingAge.Set(1.5)
	s.PendingEvents.Set(3)
	s.FailedEvents.Set(1)
	s.InflightBatches.Inc()
	s.BatchDuration.Observe(0.02)
	s.PublishDuration.Observe(0.01)
	s.ClaimDuration.Observe(0.003)
	s.BatchSize.Observe(7)
	s.CommitToPublish.Observe(0.5)
}

// TestNamesAndLabels checks every exported metric against the list in the
// package documentation: name, type and label names.
func TestNamesAndLabels(t *testing.T) {
	reg := prometheus.NewRegistry()
	touchAll(New(reg).Source("orders"))

	want := map[string]struct {
		typ    dto.MetricType
		labels []string
	}{
		"outbox_relay_events_published_total":       {dto.MetricType_COUNTER, []string{"source"}},
		"outbox_relay_events_retried_total":         {dto.MetricType_COUNTER, []string{"source"}},
		"outbox_relay_events_dead_lettered_total":   {dto.MetricType_COUNTER, []string{"reason", "source"}},
		"outbox_relay_events_deferred_total":        {dto.MetricType_COUNTER, []string{"source"}},
		"outbox_relay_claim_batches_total":          {dto.MetricType_COUNTER, []string{"source"}},
		"outbox_relay_notify_wakeups_total":         {dto.MetricType_COUNTER, []string{"source"}},
		"outbox_relay_claim_errors_total":           {dto.MetricType_COUNTER, []string{"source"}},
		"outbox_relay_last_claim_timestamp_seconds": {dto.MetricType_GAUGE, []string{"source"}},
		"outbox_relay_oldest_pending_age_seconds":   {dto.MetricType_GAUGE, []string{"source"}},
		"outbox_relay_pending_events":               {dto.MetricType_GAUGE, []string{"source"}},
		"outbox_relay_failed_events":                {dto.MetricType_GAUGE, []string{"source"}},
		"outbox_relay_inflight_batches":             {dto.MetricType_GAUGE, []string{"source"}},
		"outbox_relay_batch_duration_seconds":       {dto.MetricType_HISTOGRAM, []string{"source"}},
		"outbox_relay_publish_duration_seconds":     {dto.MetricType_HISTOGRAM, []string{"source"}},
		"outbox_relay_claim_duration_seconds":       {dto.MetricType_HISTOGRAM, []string{"source"}},
		"outbox_relay_batch_size":                   {dto.MetricType_HISTOGRAM, []string{"source"}},
		"outbox_relay_commit_to_publish_seconds":    {dto.MetricType_HISTOGRAM, []string{"source"}},
	}

	families, err := reg.Gather()
	if err != nil {
		t.Fatal(err)
	}
	if len(families) != len(want) {
		t.Errorf("gathered %d metric families, want %d", len(families), len(want))
	}
	for _, mf := range families {
		w, ok := want[mf.GetName()]
		if !ok {
			t.Errorf("unexpected metric %s", mf.GetName())
			continue
		}
		if mf.GetType() != w.typ {
			t.Errorf("%s: type %v, want %v", mf.GetName(), mf.GetType(), w.typ)
		}
		if mf.GetHelp() == "" {
			t.Errorf("%s: no help text", mf.GetName())
		}
		for _, m := range mf.GetMetric() {
			var got []string
			for _, lp := range m.GetLabel() {
				got = append(got, lp.GetName())
			}
			slices.Sort(got)
			if !slices.Equal(got, w.labels) {
				t.Errorf("%s: labels %v, want %v", mf.GetName(), got, w.labels)
			}
		}
	}

	if problems, err := testutil.GatherAndLint(reg); err != nil || len(problems) > 0 {
		t.Errorf("lint: %v %v", problems, err)
	}
}

func TestCounterValues(t *testing.T) {
	reg := prometheus.NewRegistry()
	m := New(reg)
	orders, users := m.Source("orders"), m.Source("users")
	orders.Published.Add(3)
	users.Published.Inc()
	orders.DeadLettered(ReasonExhausted).Inc()
	m.Source("orders").Published.Inc() // same series as orders

	const want = `
# HELP outbox_relay_events_published_total Events delivered to the sink.
# TYPE outbox_relay_events_published_total counter
outbox_relay_events_published_total{source="orders"} 4
outbox_relay_events_published_total{source="users"} 1
# HELP outbox_relay_events_dead_lettered_total Events moved to the dead-letter table, by reason (terminal or exhausted).
# TYPE outbox_relay_events_dead_lettered_total counter
outbox_relay_events_dead_lettered_total{reason="exhausted",source="orders"} 1
outbox_relay_events_dead_lettered_total{reason="exhausted",source="users"} 0
outbox_relay_events_dead_lettered_total{reason="terminal",source="orders"} 0
outbox_relay_events_dead_lettered_total{reason="terminal",source="users"} 0
`
	err := testutil.GatherAndCompare(reg, strings.NewReader(want),
		"outbox_relay_events_published_total", "outbox_relay_events_dead_lettered_total")
	if err != nil {
		t.Error(err)
	}
	if got := testutil.ToFloat64(m.Published.WithLabelValues("orders")); got != 4 {
		t.Errorf("published{orders} = %v, want 4", got)
	}
}

// TestSourceCreatesSeries checks that a source's series exist at zero before
// anything is recorded.
func TestSourceCreatesSeries(t *testing.T) {
	reg := prometheus.NewRegistry()
	New(reg).Source("orders")
	n, err := testutil.GatherAndCount(reg)
	if err != nil {
		t.Fatal(err)
	}
	// 16 single-series metrics plus two dead-letter reasons.
	if n != 18 {
		t.Errorf("got %d series, want 18", n)
	}
}

// TestForget: a source forgotten exports no series; the others keep
// theirs.
func TestForget(t *testing.T) {
	reg := prometheus.NewRegistry()
	m := New(reg)
	m.Source("orders@tenants/t1").OldestPendingAge.Set(600)
	m.Source("orders@tenants/t2")
	m.Queue("orders@tenants/t1", "sent").Stuck.Set(1)
	m.Forget("orders@tenants/t1")
	families, err := reg.Gather()
	if err != nil {
		t.Fatal(err)
	}
	n := 0
	for _, mf := range families {
		for _, s := range mf.GetMetric() {
			for _, l := range s.GetLabel() {
				if l.GetName() == "source" && l.GetValue() == "orders@tenants/t1" {
					t.Errorf("%s still has a series of the forgotten source", mf.GetName())
				}
			}
			n++
		}
	}
	if n != 18 {
		t.Errorf("%d series left, want the other source's 18", n)
	}
}

func TestBuckets(t *testing.T) {
	reg := prometheus.NewRegistry()
	New(reg).Source("orders").CommitToPublish.Observe(90)
	families, err := reg.Gather()
	if err != nil {
		t.Fatal(err)
	}
	for _, mf := range families {
		if mf.GetName() != "outbox_relay_commit_to_publish_seconds" {
			continue
		}
		h := mf.GetMetric()[0].GetHistogram()
		b := h.GetBucket()
		if first, last := b[0].GetUpperBound(), b[len(b)-1].GetUpperBound(); first > 0.001 || last < 300 {
			t.Errorf("buckets span %v..%v s, want 1ms to at least 5 minutes", first, last)
		}
		if h.GetSampleCount() != 1 || h.GetSampleSum() != 90 {
			t.Errorf("count %d sum %v, want 1 and 90", h.GetSampleCount(), h.GetSampleSum())
		}
		return
	}
	t.Fatal("commit_to_publish histogram not gathered")
}

func TestNewWithoutRegistry(t *testing.T) {
	s := New(nil).Source("orders")
	s.Published.Inc()
	if got := testutil.ToFloat64(s.Published); got != 1 {
		t.Errorf("got %v, want 1", got)
	}
}

func TestNewTwiceOnOneRegistryPanics(t *testing.T) {
	reg := prometheus.NewRegistry()
	New(reg)
	defer func() {
		if recover() == nil {
			t.Error("second New on the same registry did not panic")
		}
	}()
	New(reg)
}
