// Package bench measures the relay against the database's own ceiling in the
// same run (see the README's Performance section). Each run makes its own
// schema, prefills it with COPY, measures the ceiling (a loop of the relay's
// own claim and acknowledge statements, same batch size and table, no
// broker), refills, and measures the relay publishing to Kafka (an
// in-process broker unless brokers are given) or, for the drain workload,
// to another sink type on its local server (sinks.go). It reports events/s, the
// ratio relay/ceiling, CPU per event of this process and of PostgreSQL, WAL
// and transactions per event, dead tuples left, and peak RSS. With driver
// mysql the drain and keys workloads run on MySQL or MariaDB instead
// (mysql.go, mysqldrain.go, mysqlstat.go): a database of the run's own,
// prefilled with LOAD DATA, and the mariadbd process's CPU and InnoDB's redo
// bytes in place of PostgreSQL's.
package bench

import (
	"context"
	"fmt"
	"io"
	"log/slog"
	"math/rand/v2"
	"slices"
	"strings"
	"time"

	"github.com/twmb/franz-go/pkg/kfake"

	"github.com/outbox-relay/outbox-relay/internal/config"
	"github.com/outbox-relay/outbox-relay/internal/fakekafka"
)

const topic = "bench"

// Options describe a benchmark run.
type Options struct {
	DSN string
	// Driver is the database the run measures: postgres (DSN, the
	// default) or mysql (MySQLDSN: MySQL or MariaDB; drain and keys).
	Driver   string
	MySQLDSN string
	Workload string // drain, steady, sparse, keys, idle
	Rows     int
	Keys     int
	// Sources is how many idle sources the idle workload relays.
	Sources int
	// Replicas is how many relay processes (in this process) share the
	// drain's source, and Shards how many buckets it is split into.
	Replicas, Shards int
	// Databases, when set, is how many databases the run makes on the
	// server (PostgreSQL) and the relay runs as one entry: drain fills
	// each with its share of the rows, idle gives each an idle source.
	Databases int
	// MaxConns is the relay's max_conns for each database; default, for
	// drain, keys and steady maxConns(), for idle the relay's own default.
	MaxConns int
	// LeaseTTL is the relay's lease_ttl (default its own); RelayBinary the
	// outbox-relay executable the handover workload runs its replicas
	// with (default this one).
	LeaseTTL    time.Duration
	RelayBinary string
	// History is how many rows already delivered a drain's table holds
	// before its backlog (older, before it in the claim's order), as a
	// table that keeps its delivered rows has after months of use; each
	// prefill loads them again. Tables whose rows are deleted on delivery
	// have none (Result.HistoryNote says so).
	History      int
	PayloadBytes int
	BatchSize    int
	Pipeline     int
	Layouts      []string // delete, mark, queue
	// Presets, when set, are the tables drain measures instead of
	// Layouts: presets' tables as their teams wrote them ("all": every
	// preset the driver has).
	Presets []string
	// NoAnalyze measures each drain first on a table never analyzed
	// (autovacuum off; MySQL: statistics not recalculated), then on a
	// fresh one analyzed after its prefill.
	NoAnalyze bool
	// MaxTime cuts each ceiling loop and relay drain short after this long
	// (default DefaultMaxTime); the rate is then of the rows drained.
	MaxTime   time.Duration
	Orderings []bool
	// Deliveries are the delivery modes drain measures (at_least_once,
	// exactly_once); default at_least_once.
	Deliveries []string
	// Repeat runs each drain this many times, the modes interleaved, so
	// that the spread between runs shows beside the difference between
	// modes. Default 1.
	Repeat  int
	Brokers []string // empty: the in-memory broker, in a child process
	// InProcessBroker runs the in-memory broker inside this process instead
	// (its CPU and memory then count as the relay's).
	InProcessBroker bool
	Partitions      int
	// Sink is the sink type the drain workload's relay phase publishes to
	// (one of Sinks; default kafka). Other workloads publish to Kafka.
	Sink string
	// SinkURL is the server of a sink other than Kafka; default the local
	// one. The webhook sink's receiver always runs in this process.
	SinkURL string
	// Rates, RowsPerTx and Duration shape the steady workload.
	Rates     []int
	RowsPerTx []int
	Duration  time.Duration
	// RelayProfile, when set, receives a CPU profile of the first relay
	// phase only (not the prefill or the ceiling).
	RelayProfile io.Writer
	Progress     io.Writer // progress lines
	Logger       *slog.Logger
}

// Measure is one side of a comparison.
type Measure struct {
	Events          int     `json:"events"`
	Seconds         float64 `json:"seconds"`
	EventsPerSec    float64 `json:"events_per_sec"`
	CPUMsPer1k      float64 `json:"relay_cpu_ms_per_1k_events"`
	PostgresCPUMs1k float64 `json:"postgres_cpu_ms_per_1k_events,omitempty"`
	// MariaDBCPUMs1k is the mariadbd process's CPU (--driver mysql).
	MariaDBCPUMs1k   float64 `json:"mariadb_cpu_ms_per_1k_events,omitempty"`
	BrokerCPUMs1k    float64 `json:"broker_cpu_ms_per_1k_events"`
	WALBytesPerEvent float64 `json:"wal_bytes_per_event"`
	// RedoBytesPerEvent is InnoDB's redo log written (--driver mysql;
	// server-wide, so other clients' writes count too).
	RedoBytesPerEvent float64 `json:"redo_bytes_per_event,omitempty"`
	XactsPerEvent     float64 `json:"transactions_per_event"`
	// StmtsPerEvent counts the statements the relay's connections sent
	// (BEGIN and COMMIT included), per event.
	StmtsPerEvent   float64 `json:"statements_per_event"`
	DeadTuplesAfter int64   `json:"dead_tuples_after"`
	// CutShort says the time limit ended the measurement: Events is what
	// was drained by then, EventsPerSec that over Seconds.
	CutShort bool `json:"cut_short,omitempty"`
	// PlannerRows is the table's row count in its statistics when the
	// relay started (PostgreSQL: pg_class.reltuples, -1 never analyzed;
	// MySQL: InnoDB's persistent n_rows), beside Rows actually there.
	PlannerRows *int64 `json:"planner_rows_at_start,omitempty"`
}

// Result is one workload in one layout and ordering mode.
type Result struct {
	Workload string `json:"workload"`
	Driver   string `json:"driver"` // postgres or mysql
	Layout   string `json:"layout,omitempty"`
	// Preset is the preset whose table was drained (--preset), in place
	// of Layout.
	Preset   string `json:"preset,omitempty"`
	Ordering bool   `json:"ordering"`
	Delivery string `json:"delivery,omitempty"`
	Rows     int    `json:"rows"`
	// History is how many delivered rows the table held before its
	// backlog (--history); HistoryNote says why none where asked for and
	// the table cannot keep them.
	History     int    `json:"history_rows"`
	HistoryNote string `json:"history_note,omitempty"`
	// TableRowsAfter and DeliveredAfter are the rows in the table after
	// the relay phase, and of them those in the delivered state (with a
	// history: the history's rows and the relayed backlog's).
	TableRowsAfter *int `json:"table_rows_after,omitempty"`
	DeliveredAfter *int `json:"delivered_rows_after,omitempty"`
	Keys           int  `json:"keys"`
	Replicas       int  `json:"replicas,omitempty"`
	Shards         int  `json:"shards,omitempty"`
	// Databases is how many databases the rows were spread over
	// (--databases; 0: the run's own database alone).
	Databases int     `json:"databases,omitempty"`
	BatchSize int     `json:"batch_size"`
	Pipeline  int     `json:"pipeline"`
	Ceiling   Measure `json:"ceiling"`
	Relay     Measure `json:"relay"`
	Ratio     float64 `json:"ratio"`
	// NoAnalyze is the relay on a backlog never analyzed (--no-analyze);
	// Relay is then the same drain on a fresh table analyzed after its
	// prefill, and NoAnalyzeRatio the first rate over the second.
	NoAnalyze      *Measure `json:"relay_no_analyze,omitempty"`
	NoAnalyzeRatio float64  `json:"no_analyze_ratio,omitempty"`
	// Bound is what this machine could carry: see MachineBound.
	Bound        MachineBound `json:"machine_bound"`
	PeakRSSBytes int64        `json:"relay_peak_rss_bytes"`
	// OrderHeld (keys workload) says whether every key's events arrived in
	// the order they were written.
	OrderHeld *bool `json:"order_held,omitempty"`
	BrokerRSS int64 `json:"broker_peak_rss_bytes"`
	// Sink is the sink type the relay published to, and SinkNote where
	// and how.
	Sink     string `json:"sink"`
	SinkNote string `json:"sink_note"`
	// SinkStored is how many events the sink's server held after the relay
	// phase, where it can tell.
	SinkStored *int `json:"sink_stored,omitempty"`
	// SinkCeiling is what the sink's server takes from its own client in
	// the same run (sinks other than Kafka), and SinkRatio the relay's rate
	// over it.
	SinkCeiling *SinkCeiling `json:"sink_ceiling,omitempty"`
	SinkRatio   float64      `json:"ratio_to_sink_ceiling,omitempty"`
}

// Report is what a run measured.
type Report struct {
	Drain []Result     `json:"drain,omitempty"`
	Rates []RateResult `json:"rates,omitempty"`
	Idle  []IdleResult `json:"idle,omitempty"`
	// Handover is what the handover workload measured.
	Handover *HandoverResult `json:"handover,omitempty"`
}

// Run executes the benchmark.
func Run(ctx context.Context, o Options) (*Report, error) {
	switch o.Workload {
	case "drain", "steady", "sparse", "keys", "idle", "handover":
	default:
		return nil, fmt.Errorf("unknown workload %q (have: drain, steady, sparse, keys, idle, handover)", o.Workload)
	}
	if o.Workload == "handover" && o.Replicas < 2 {
		return nil, fmt.Errorf("handover: --replicas %d: one replica stops, others must take its shards: give 2 or more", o.Replicas)
	}
	if o.Sink == "" {
		o.Sink = "kafka"
	}
	if !slices.Contains(Sinks, o.Sink) {
		return nil, fmt.Errorf("unknown sink %q (have: %s)", o.Sink, strings.Join(Sinks, ", "))
	}
	if o.Sink != "kafka" && o.Workload != "drain" {
		return nil, fmt.Errorf("workload %s publishes to Kafka only; --sink %s applies to drain", o.Workload, o.Sink)
	}
	if slices.Contains(o.Layouts, "queue") && len(o.Presets) == 0 && (o.Workload != "drain" || o.Driver == "mysql") {
		return nil, fmt.Errorf("layout queue runs the drain workload on PostgreSQL only")
	}
	if (len(o.Presets) > 0 || o.NoAnalyze || o.History != 0) && o.Workload != "drain" {
		return nil, fmt.Errorf("--preset, --no-analyze and --history apply to the drain workload")
	}
	if o.History < 0 {
		return nil, fmt.Errorf("--history %d: must be 0 or more", o.History)
	}
	if err := checkDatabases(o); err != nil {
		return nil, err
	}
	if o.Workload == "drain" {
		if _, err := drainSpecs(o); err != nil {
			return nil, err
		}
	}
	switch o.Driver {
	case "", "postgres":
	case "mysql":
		if o.Workload != "drain" && o.Workload != "keys" {
			return nil, fmt.Errorf("workload %s runs on PostgreSQL only; --driver mysql has drain and keys", o.Workload)
		}
		return runMySQL(ctx, o)
	default:
		return nil, fmt.Errorf("unknown driver %q (have: postgres, mysql)", o.Driver)
	}
	own, dropOwn, err := ownDatabase(ctx, o.DSN)
	if err != nil {
		return nil, err
	}
	defer dropOwn()
	dbs, dropDBs, err := workDatabases(ctx, own, o)
	if err != nil {
		return nil, err
	}
	defer dropDBs()
	k, stopKafka, err := newKafkaEnv(o)
	if err != nil {
		return nil, err
	}
	defer stopKafka()
	rep := &Report{}
	if o.Workload == "idle" {
		run := idleRun
		n := max(o.Sources, 1)
		if o.Databases > 0 {
			run, n = idleDatabasesRun, o.Databases
		}
		r, err := run(ctx, own, k, o, n, o.Duration)
		if err == nil {
			rep.Idle = append(rep.Idle, r)
		}
		return rep, err
	}
	if o.Workload == "handover" {
		rep.Handover, err = handoverRun(ctx, dbs, k, o)
		return rep, err
	}
	if o.Workload == "keys" {
		for _, keys := range []int{1, o.Keys} {
			r, err := keysRun(ctx, own, o, k, keys)
			if err != nil {
				return rep, err
			}
			rep.Drain = append(rep.Drain, r)
		}
		return rep, nil
	}
	if o.Workload != "drain" {
		for _, layout := range o.Layouts {
			rs, err := steady(ctx, own, k, o, layout, o.Workload)
			rep.Rates = append(rep.Rates, rs...)
			if err != nil {
				return rep, err
			}
		}
		return rep, nil
	}
	specs, err := drainSpecs(o)
	if err != nil {
		return nil, err
	}
	for _, sp := range specs {
		for _, ordering := range o.Orderings {
			err := eachDelivery(&o, func(od Options) error {
				r, err := drain(ctx, dbs, od, k, sp, ordering)
				if err == nil {
					rep.Drain = append(rep.Drain, r)
				}
				return err
			})
			if err != nil {
				return rep, err
			}
		}
	}
	return rep, nil
}

// eachDelivery runs a drain once per delivery mode, the modes interleaved,
// o.Repeat times; od asks for one mode. Only the first run profiles.
func eachDelivery(o *Options, run func(od Options) error) error {
	deliveries := o.Deliveries
	if len(deliveries) == 0 {
		deliveries = []string{config.DeliveryAtLeastOnce}
	}
	for range max(o.Repeat, 1) {
		for _, delivery := range deliveries {
			od := *o
			od.Deliveries = []string{delivery}
			err := run(od)
			o.RelayProfile = nil // one profile per file: the first relay run
			if err != nil {
				return err
			}
		}
	}
	return nil
}

// newKafkaEnv starts the run's Kafka cluster as o asks (none when the sink
// is another type or brokers are given); stop ends it.
func newKafkaEnv(o Options) (k kafkaEnv, stop func(), err error) {
	k = kafkaEnv{brokers: o.Brokers, note: "Kafka cluster at " + strings.Join(o.Brokers, ",")}
	stop = func() {}
	switch {
	case o.Sink != "kafka":
	case len(k.brokers) > 0:
	case o.InProcessBroker:
		// The benchmark's sink leaves auto_create_topics off.
		c, err := fakekafka.New(false, kfake.SeedTopics(int32(o.Partitions), topic))
		if err != nil {
			return k, stop, err
		}
		k.brokers = c.ListenAddrs()
		k.note = "in-memory Kafka broker (kfake) in the same process as the relay: its CPU is counted in the relay's"
		stop = c.Close
	default:
		if k.br, err = startBroker(o.Partitions); err != nil {
			return k, stop, err
		}
		k.brokers = []string{k.br.addr}
		k.note = "in-memory Kafka broker (kfake) in a child process"
		stop = k.br.stop
	}
	return k, stop, nil
}

func newSchema() string { return fmt.Sprintf("outbox_bench_%06x", rand.N(1<<24)) }
