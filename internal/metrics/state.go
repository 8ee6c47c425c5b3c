package metrics

import "github.com/prometheus/client_golang/prometheus"

// SourceState is how a source stands in this process: its state
// (relaying, starting, standby, stuck) and, when it does not relay, why.
type SourceState struct {
	Source, State, Cause string
	// Shards are the leases of a source split into buckets, each with
	// whether this process relays it; none for a whole source.
	Shards []ShardHeld
}

// ShardHeld is one bucket's lease of a split source.
type ShardHeld struct {
	Shard string
	Held  bool
}

// StateCollector exports, at every scrape, the states a function reports
// now (not a value set earlier that may have gone stale):
//
//	outbox_relay_source_relaying{source}           1 while the source is relayed by this process, else 0
//	outbox_relay_source_state{source,state,cause}  1, with the source's state and why it does not relay
//	outbox_relay_shard_relaying{source,shard}      1 while a bucket of a split source is relayed here, else 0
type StateCollector struct {
	states   func() []SourceState
	relaying *prometheus.Desc
	state    *prometheus.Desc
	shard    *prometheus.Desc
}

// NewStateCollector returns the collector of the states states reports.
func NewStateCollector(states func() []SourceState) *StateCollector {
	return &StateCollector{
		states: states,
		relaying: prometheus.NewDesc(namespace+"_source_relaying",
			"1 while this process relays the source (it holds its lease and claims), else 0.", []string{"source"}, nil),
		state: prometheus.NewDesc(namespace+"_source_state",
			"The source's state in this process (relaying, starting, standby, stuck) and why it does not relay "+
				"(cause: takeover_failing, topic_missing, claims_failing, backlog_too_old, no_claim, circuit_open, "+
				"lease_elsewhere, lease_unheld; empty while relaying).", []string{"source", "state", "cause"}, nil),
		shard: prometheus.NewDesc(namespace+"_shard_relaying",
			"1 while this process relays the bucket (sources[].shards) of a split source (it holds its lease), else 0.",
			[]string{"source", "shard"}, nil),
	}
}

// Describe implements prometheus.Collector.
func (c *StateCollector) Describe(ch chan<- *prometheus.Desc) {
	ch <- c.relaying
	ch <- c.state
	ch <- c.shard
}

// Collect implements prometheus.Collector.
func (c *StateCollector) Collect(ch chan<- prometheus.Metric) {
	for _, s := range c.states() {
		v := 0.0
		if s.State == "relaying" {
			v = 1
		}
		ch <- prometheus.MustNewConstMetric(c.relaying, prometheus.GaugeValue, v, s.Source)
		ch <- prometheus.MustNewConstMetric(c.state, prometheus.GaugeValue, 1, s.Source, s.State, s.Cause)
		for _, sh := range s.Shards {
			v := 0.0
			if sh.Held {
				v = 1
			}
			ch <- prometheus.MustNewConstMetric(c.shard, prometheus.GaugeValue, v, s.Source, sh.Shard)
		}
	}
}
