// Package bench measures the relay against the database's own ceiling in the
// same run (see the README's Performance section). Each run makes its own
// schema, prefills it with COPY, measures the ceiling (a loop of the relay's
// own claim and acknowledge statements, same batch size and table, no
// broker), refills, and measures the relay publishing to Kafka (an
// in-process broker unless brokers are given). It reports events/s, the
// ratio relay/ceiling, CPU per event of this process and of PostgreSQL, WAL
// and transactions per event, dead tuples left, and peak RSS.
package bench

import (
	"context"
	"encoding/json"
	"fmt"
	"io"
	"log/slog"
	"math/rand/v2"
	"os"
	"text/tabwriter"
	"time"

	"github.com/jackc/pgx/v5/pgxpool"
	"github.com/twmb/franz-go/pkg/kfake"
)

const topic = "bench"

// Options describe a benchmark run.
type Options struct {
	DSN          string
	Workload     string // drain
	Rows         int
	Keys         int
	PayloadBytes int
	BatchSize    int
	Pipeline     int
	Layouts      []string // delete, mark
	Orderings    []bool
	Brokers      []string // empty: the in-memory broker, in a child process
	// InProcessBroker runs the in-memory broker inside this process instead
	// (its CPU and memory then count as the relay's).
	InProcessBroker bool
	Partitions      int
	Out             io.Writer // the table
	Progress        io.Writer // progress lines
	Logger          *slog.Logger
}

// Measure is one side of a comparison.
type Measure struct {
	Events           int     `json:"events"`
	Seconds          float64 `json:"seconds"`
	EventsPerSec     float64 `json:"events_per_sec"`
	CPUMsPer1k       float64 `json:"relay_cpu_ms_per_1k_events"`
	PostgresCPUMs1k  float64 `json:"postgres_cpu_ms_per_1k_events"`
	BrokerCPUMs1k    float64 `json:"broker_cpu_ms_per_1k_events"`
	WALBytesPerEvent float64 `json:"wal_bytes_per_event"`
	XactsPerEvent    float64 `json:"transactions_per_event"`
	DeadTuplesAfter  int64   `json:"dead_tuples_after"`
}

// Result is one workload in one layout and ordering mode.
type Result struct {
	Workload     string  `json:"workload"`
	Layout       string  `json:"layout"`
	Ordering     bool    `json:"ordering"`
	Rows         int     `json:"rows"`
	Keys         int     `json:"keys"`
	BatchSize    int     `json:"batch_size"`
	Pipeline     int     `json:"pipeline"`
	Ceiling      Measure `json:"ceiling"`
	Relay        Measure `json:"relay"`
	Ratio        float64 `json:"ratio"`
	PeakRSSBytes int64   `json:"relay_peak_rss_bytes"`
	BrokerRSS    int64   `json:"broker_peak_rss_bytes"`
}

// Run executes the benchmark and returns one result per layout and ordering.
func Run(ctx context.Context, o Options) ([]Result, error) {
	if o.Workload != "drain" {
		return nil, fmt.Errorf("workload %q is not available (have: drain)", o.Workload)
	}
	pool, err := pgxpool.New(ctx, o.DSN)
	if err != nil {
		return nil, fmt.Errorf("connect: %w", err)
	}
	defer pool.Close()
	if err := pool.Ping(ctx); err != nil {
		return nil, fmt.Errorf("connect to %s: %w", o.DSN, err)
	}
	brokers := o.Brokers
	var br *broker
	switch {
	case len(brokers) > 0:
	case o.InProcessBroker:
		c, err := kfake.NewCluster(kfake.NumBrokers(1), kfake.SeedTopics(int32(o.Partitions), topic))
		if err != nil {
			return nil, fmt.Errorf("start in-process Kafka: %w", err)
		}
		defer c.Close()
		brokers = c.ListenAddrs()
	default:
		if br, err = startBroker(o.Partitions); err != nil {
			return nil, err
		}
		defer br.stop()
		brokers = []string{br.addr}
	}
	var out []Result
	for _, layout := range o.Layouts {
		for _, ordering := range o.Orderings {
			r, err := drain(ctx, pool, o, brokers, br, layout, ordering)
			if err != nil {
				return out, err
			}
			out = append(out, r)
		}
	}
	return out, nil
}

func newSchema() string { return fmt.Sprintf("outbox_bench_%06x", rand.N(1<<24)) }

// Print writes results as a table a person can read.
func Print(w io.Writer, rs []Result) {
	tw := tabwriter.NewWriter(w, 0, 4, 2, ' ', tabwriter.AlignRight)
	fmt.Fprintln(tw, "workload\tlayout\tordering\trows\tceiling ev/s\trelay ev/s\tratio\trelay CPU µs/ev\tpg CPU µs/ev\tbroker CPU µs/ev\tWAL B/ev\txacts/ev\tdead tuples\trelay RSS MB\t")
	for _, r := range rs {
		ord := "off"
		if r.Ordering {
			ord = "on"
		}
		fmt.Fprintf(tw, "%s\t%s\t%s\t%d\t%.0f\t%.0f\t%.2f\t%.1f\t%.1f\t%.1f\t%.0f\t%.4f\t%d\t%.0f\t\n",
			r.Workload, r.Layout, ord, r.Rows, r.Ceiling.EventsPerSec, r.Relay.EventsPerSec, r.Ratio,
			r.Relay.CPUMsPer1k, r.Relay.PostgresCPUMs1k, r.Relay.BrokerCPUMs1k, r.Relay.WALBytesPerEvent, r.Relay.XactsPerEvent,
			r.Relay.DeadTuplesAfter, float64(r.PeakRSSBytes)/(1<<20))
	}
	_ = tw.Flush()
}

// WriteJSON writes results to path.
func WriteJSON(path string, rs []Result) error {
	b, err := json.MarshalIndent(map[string]any{"time": time.Now().UTC(), "results": rs}, "", "  ")
	if err != nil {
		return err
	}
	return os.WriteFile(path, append(b, '\n'), 0o644)
}
