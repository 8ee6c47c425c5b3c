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
	"cmp"
	"context"
	"encoding/json"
	"fmt"
	"io"
	"log/slog"
	"math/rand/v2"
	"net/url"
	"os"
	"slices"
	"strings"
	"text/tabwriter"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgxpool"
	"github.com/twmb/franz-go/pkg/kfake"

	"github.com/outbox-relay/outbox-relay/internal/config"
)

const topic = "bench"

// Options describe a benchmark run.
type Options struct {
	DSN string
	// Driver is the database the run measures: postgres (DSN, the
	// default) or mysql (MySQLDSN: MySQL or MariaDB; drain and keys).
	Driver       string
	MySQLDSN     string
	Workload     string // drain, steady, sparse
	Rows         int
	Keys         int
	PayloadBytes int
	BatchSize    int
	Pipeline     int
	Layouts      []string // delete, mark, queue
	Orderings    []bool
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
}

// Result is one workload in one layout and ordering mode.
type Result struct {
	Workload     string  `json:"workload"`
	Driver       string  `json:"driver"` // postgres or mysql
	Layout       string  `json:"layout"`
	Ordering     bool    `json:"ordering"`
	Delivery     string  `json:"delivery,omitempty"`
	Rows         int     `json:"rows"`
	Keys         int     `json:"keys"`
	BatchSize    int     `json:"batch_size"`
	Pipeline     int     `json:"pipeline"`
	Ceiling      Measure `json:"ceiling"`
	Relay        Measure `json:"relay"`
	Ratio        float64 `json:"ratio"`
	PeakRSSBytes int64   `json:"relay_peak_rss_bytes"`
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
}

// Report is what a run measured.
type Report struct {
	Drain []Result     `json:"drain,omitempty"`
	Rates []RateResult `json:"rates,omitempty"`
}

// Run executes the benchmark.
func Run(ctx context.Context, o Options) (*Report, error) {
	switch o.Workload {
	case "drain", "steady", "sparse", "keys":
	default:
		return nil, fmt.Errorf("unknown workload %q (have: drain, steady, sparse, keys)", o.Workload)
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
	if slices.Contains(o.Layouts, "queue") && (o.Workload != "drain" || o.Driver == "mysql") {
		return nil, fmt.Errorf("layout queue runs the drain workload on PostgreSQL only")
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
	dsn, dropDB, err := ownDatabase(ctx, o.DSN)
	if err != nil {
		return nil, err
	}
	defer dropDB()
	pc, err := pgxpool.ParseConfig(dsn)
	if err != nil {
		return nil, fmt.Errorf("dsn: %w", err)
	}
	pc.MaxConns = 40 // the load generator's producers
	pool, err := pgxpool.NewWithConfig(ctx, pc)
	if err != nil {
		return nil, fmt.Errorf("connect: %w", err)
	}
	defer pool.Close()
	k, stopKafka, err := newKafkaEnv(o)
	if err != nil {
		return nil, err
	}
	defer stopKafka()
	rep := &Report{}
	if o.Workload == "keys" {
		for _, keys := range []int{1, o.Keys} {
			r, err := keysRun(ctx, pool, dsn, o, k, keys)
			if err != nil {
				return rep, err
			}
			rep.Drain = append(rep.Drain, r)
		}
		return rep, nil
	}
	for _, layout := range o.Layouts {
		if o.Workload != "drain" {
			rs, err := steady(ctx, pool, dsn, k, o, layout, o.Workload)
			rep.Rates = append(rep.Rates, rs...)
			if err != nil {
				return rep, err
			}
			continue
		}
		for _, ordering := range o.Orderings {
			err := eachDelivery(&o, func(od Options) error {
				r, err := drain(ctx, pool, dsn, od, k, layout, ordering)
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
		c, err := kfake.NewCluster(kfake.NumBrokers(1), kfake.SeedTopics(int32(o.Partitions), topic))
		if err != nil {
			return k, stop, fmt.Errorf("start in-process Kafka: %w", err)
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

// ownDatabase creates a database for the run, so that the database-wide
// counters (transactions, idle queries) are the run's alone, and returns its
// DSN. Without the privilege to create one, the run uses dsn's database.
func ownDatabase(ctx context.Context, dsn string) (string, func(), error) {
	conn, err := pgx.Connect(ctx, dsn)
	if err != nil {
		return "", nil, fmt.Errorf("connect to %s: %w", dsn, err)
	}
	defer conn.Close(ctx)
	name := fmt.Sprintf("outbox_bench_%06x", rand.N(1<<24))
	if _, err := conn.Exec(ctx, "CREATE DATABASE "+name); err != nil {
		return dsn, func() {}, nil
	}
	u, err := url.Parse(dsn)
	if err != nil || u.Scheme == "" {
		return dsn, func() {}, nil
	}
	u.Path = "/" + name
	drop := func() {
		c, err := pgx.Connect(context.WithoutCancel(ctx), dsn)
		if err != nil {
			return
		}
		defer c.Close(context.WithoutCancel(ctx))
		_, _ = c.Exec(context.WithoutCancel(ctx), "DROP DATABASE IF EXISTS "+name+" WITH (FORCE)")
	}
	return u.String(), drop, nil
}

func newSchema() string { return fmt.Sprintf("outbox_bench_%06x", rand.N(1<<24)) }

// Print writes the report as tables a person can read.
func Print(w io.Writer, rep *Report) {
	if rep == nil {
		return
	}
	if len(rep.Drain) > 0 {
		printDrain(w, rep.Drain)
	}
	if len(rep.Rates) > 0 {
		printRates(w, rep.Rates)
	}
}

func printRates(w io.Writer, rs []RateResult) {
	tw := tabwriter.NewWriter(w, 0, 4, 2, ' ', tabwriter.AlignRight)
	fmt.Fprintln(tw, "workload\tlayout\trate ev/s\trows/tx\tachieved ev/s\tp50 ms\tp99 ms\tp99.9 ms\tmax ms\tsustainable\tidle q/s\t")
	for _, r := range rs {
		idle := "-"
		if r.Workload == "sparse" {
			idle = fmt.Sprintf("%.2f", r.IdleQueriesPerSec)
		}
		fmt.Fprintf(tw, "%s\t%s\t%d\t%d\t%.0f\t%.1f\t%.1f\t%.1f\t%.1f\t%v\t%s\t\n", r.Workload, r.Layout, r.Rate, r.RowsPerTx,
			r.Achieved, r.Latency.P50, r.Latency.P99, r.Latency.P999, r.Latency.Max, r.Sustainable, idle)
	}
	_ = tw.Flush()
	best := map[string]int{}
	for _, r := range rs {
		if r.Workload == "steady" && r.Sustainable {
			k := fmt.Sprintf("%s, %d rows/tx", r.Layout, r.RowsPerTx)
			best[k] = max(best[k], r.Rate)
		}
	}
	for k, v := range best {
		fmt.Fprintf(w, "highest sustainable steady rate (%s): %d events/s\n", k, v)
	}
}

func printDrain(w io.Writer, rs []Result) {
	tw := tabwriter.NewWriter(w, 0, 4, 2, ' ', tabwriter.AlignRight)
	my := rs[0].Driver == "mysql"
	dbCol, logCol, deadCol := "pg CPU µs/ev", "WAL B/ev", "dead tuples"
	if my {
		dbCol, logCol = "mariadb CPU µs/ev", "redo B/ev"
	}
	fmt.Fprintf(tw, "workload\tsink\tdelivery\tlayout\tordering\trows\tkeys\tceiling ev/s\trelay ev/s\tratio\trelay CPU µs/ev\t%s\tbroker CPU µs/ev\t%s\txacts/ev\tstmts/ev\t%s\trelay RSS MB\t\n", dbCol, logCol, deadCol)
	for _, r := range rs {
		ord := "off"
		if r.Ordering {
			ord = "on"
		}
		ceil, ratio := fmt.Sprintf("%.0f", r.Ceiling.EventsPerSec), fmt.Sprintf("%.2f", r.Ratio)
		if r.Ceiling.Events == 0 {
			ceil, ratio = "-", "-"
		}
		if r.OrderHeld != nil && !*r.OrderHeld {
			ratio += " ORDER BROKEN"
		}
		dbCPU, logBytes, dead := r.Relay.PostgresCPUMs1k, r.Relay.WALBytesPerEvent, fmt.Sprint(r.Relay.DeadTuplesAfter)
		if r.Driver == "mysql" {
			dbCPU, logBytes, dead = r.Relay.MariaDBCPUMs1k, r.Relay.RedoBytesPerEvent, "-"
		}
		fmt.Fprintf(tw, "%s\t%s\t%s\t%s\t%s\t%d\t%d\t%s\t%.0f\t%s\t%.1f\t%.1f\t%.1f\t%.0f\t%.4f\t%.4f\t%s\t%.0f\t\n",
			r.Workload, r.Sink, cmp.Or(r.Delivery, config.DeliveryAtLeastOnce), r.Layout, ord, r.Rows, r.Keys, ceil, r.Relay.EventsPerSec, ratio,
			r.Relay.CPUMsPer1k, dbCPU, r.Relay.BrokerCPUMs1k, logBytes, r.Relay.XactsPerEvent, r.Relay.StmtsPerEvent,
			dead, float64(r.PeakRSSBytes)/(1<<20))
	}
	_ = tw.Flush()
	if my {
		fmt.Fprintln(w, "mariadb CPU and redo bytes are the whole server's, its other clients included; xacts are the relay's COMMITs and ROLLBACKs")
	}
	said := map[string]bool{}
	for _, r := range rs {
		if r.SinkNote != "" && !said[r.SinkNote] {
			said[r.SinkNote] = true
			fmt.Fprintf(w, "sink %s: %s\n", r.Sink, r.SinkNote)
		}
		if r.SinkStored != nil && *r.SinkStored < r.Relay.Events {
			fmt.Fprintf(w, "sink %s (%s, ordering %v): the server holds %d events of %d published\n", r.Sink, r.Layout, r.Ordering, *r.SinkStored, r.Relay.Events)
		}
	}
}

// WriteJSON writes the report to path.
func WriteJSON(path string, rep *Report) error {
	b, err := json.MarshalIndent(map[string]any{"time": time.Now().UTC(), "report": rep}, "", "  ")
	if err != nil {
		return err
	}
	return os.WriteFile(path, append(b, '\n'), 0o644)
}
