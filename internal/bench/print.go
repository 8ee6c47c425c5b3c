package bench

import (
	"cmp"
	"encoding/json"
	"fmt"
	"io"
	"os"
	"slices"
	"strconv"
	"text/tabwriter"
	"time"

	"github.com/outbox-relay/outbox-relay/internal/config"
)

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
	if len(rep.Idle) > 0 {
		printIdle(w, rep.Idle)
	}
	if rep.Handover != nil {
		printHandover(w, rep.Handover)
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
	noAnalyze := slices.ContainsFunc(rs, func(r Result) bool { return r.NoAnalyze != nil })
	naCols := ""
	if noAnalyze {
		naCols = "not analyzed ev/s\tnot/analyzed\tplanner rows not/analyzed\t"
	}
	sinkCeil := slices.ContainsFunc(rs, func(r Result) bool { return r.SinkCeiling != nil })
	scCols := ""
	if sinkCeil {
		scCols = "sink ceiling ev/s\trelay/sink ceiling\t"
	}
	history := slices.ContainsFunc(rs, func(r Result) bool { return r.History > 0 || r.HistoryNote != "" })
	histCol := ""
	if history {
		histCol = "history\t"
	}
	fmt.Fprintf(tw, "workload\tsink\tdelivery\tlayout\tordering\trows\t%skeys\tceiling ev/s\trelay ev/s\tratio\tmachine ev/s\tratio to lower\t%s%srelay CPU µs/ev\t%s\t%s ceiling\tbroker CPU µs/ev\t%s\txacts/ev\tstmts/ev\t%s\trelay RSS MB\t\n", histCol, scCols, naCols, dbCol, dbCol, logCol, deadCol)
	cut := false
	rate := func(m Measure) string {
		cut = cut || m.CutShort
		return fmt.Sprintf("%.0f%s", m.EventsPerSec, map[bool]string{true: "*"}[m.CutShort])
	}
	for _, r := range rs {
		ord := "off"
		if r.Ordering {
			ord = "on"
		}
		ceil, ratio := rate(r.Ceiling), fmt.Sprintf("%.2f", r.Ratio)
		if r.Ceiling.Events == 0 && !r.Ceiling.CutShort {
			ceil, ratio = "-", "-"
		}
		if r.OrderHeld != nil && !*r.OrderHeld {
			ratio += " ORDER BROKEN"
		}
		na := ""
		if noAnalyze {
			na = "-\t-\t-\t"
			if m := r.NoAnalyze; m != nil {
				na = fmt.Sprintf("%s\t%.2f\t%s/%s\t", rate(*m), r.NoAnalyzeRatio, rowsOrDash(m.PlannerRows), rowsOrDash(r.Relay.PlannerRows))
			}
		}
		dbCPU, logBytes, dead := r.Relay.PostgresCPUMs1k, r.Relay.WALBytesPerEvent, fmt.Sprint(r.Relay.DeadTuplesAfter)
		if r.Driver == "mysql" {
			dbCPU, logBytes, dead = r.Relay.MariaDBCPUMs1k, r.Relay.RedoBytesPerEvent, "-"
		}
		hist := ""
		if history {
			hist = strconv.Itoa(r.History) + "\t"
			if r.HistoryNote != "" {
				hist = "n/a\t"
			}
		}
		sc := ""
		if sinkCeil {
			sc = "-\t-\t"
			if c := r.SinkCeiling; c != nil {
				cut = cut || c.CutShort
				sc = fmt.Sprintf("%.0f%s\t%.2f\t", c.EventsPerSec, map[bool]string{true: "*"}[c.CutShort], r.SinkRatio)
			}
		}
		fmt.Fprintf(tw, "%s\t%s\t%s\t%s\t%s\t%d\t%s%d\t%s\t%s\t%s\t%.0f\t%.2f\t%s%s%.1f\t%.1f\t%.1f\t%.1f\t%.0f\t%.4f\t%.4f\t%s\t%.0f\t\n",
			r.Workload, r.Sink, cmp.Or(r.Delivery, config.DeliveryAtLeastOnce), r.label(), ord, r.Rows, hist, r.Keys, ceil, rate(r.Relay), ratio,
			r.Bound.EventsPerSec, r.Bound.Ratio, sc, na,
			r.Relay.CPUMsPer1k, dbCPU, r.Bound.DatabaseCPUCeiling, r.Relay.BrokerCPUMs1k, logBytes, r.Relay.XactsPerEvent, r.Relay.StmtsPerEvent,
			dead, float64(r.PeakRSSBytes)/(1<<20))
	}
	_ = tw.Flush()
	fmt.Fprintf(w, "machine ev/s: this machine's %d cores ÷ the CPU the relay, the database and the broker spent per event in the relay phase; ratio to lower: relay ev/s over the lower of it and the ceiling\n", cores())
	if cut {
		fmt.Fprintln(w, "* cut short at the time limit (--max-time): the rate of the rows drained by then (rows drained / elapsed)")
	}
	if noAnalyze {
		fmt.Fprintln(w, "not analyzed: the relay on a backlog in a table never analyzed, its statistics left alone (PostgreSQL: autovacuum off); relay ev/s: a fresh table of the same shape analyzed after its prefill; planner rows: the table's row count in its statistics as the relay started")
		if my {
			fmt.Fprintln(w, "MariaDB/MySQL: STATS_PERSISTENT=1, STATS_AUTO_RECALC=0 keep InnoDB's statistics at the empty table's until ANALYZE TABLE; the optimizer still estimates a range's rows by diving into the index (records_in_range), so its plans lean less on them than PostgreSQL's")
		}
	}
	if history {
		fmt.Fprintln(w, "history: rows already delivered, older than the backlog and before it in the claim's order, in the table through the ceiling loop and the relay phase (--history)")
		for _, r := range rs {
			switch {
			case r.HistoryNote != "":
				fmt.Fprintf(w, "history, %s: %s\n", r.label(), r.HistoryNote)
			case r.TableRowsAfter != nil && r.DeliveredAfter != nil && *r.DeliveredAfter != *r.TableRowsAfter:
				fmt.Fprintf(w, "history, %s ordering %v: %d of the table's %d rows delivered after the relay phase\n", r.label(), r.Ordering, *r.DeliveredAfter, *r.TableRowsAfter)
			}
		}
	}
	if my {
		fmt.Fprintln(w, "mariadb CPU and redo bytes are the whole server's, its other clients included; xacts are the relay's COMMITs and ROLLBACKs")
	}
	if sinkCeil {
		fmt.Fprintln(w, "sink ceiling ev/s: the drain's messages (same count, payloads and keys) published to the same server by its own client, into a stream, queue or receiver of their own; relay/sink ceiling: relay ev/s over it")
	}
	said := map[string]bool{}
	for _, r := range rs {
		if r.SinkNote != "" && !said[r.SinkNote] {
			said[r.SinkNote] = true
			fmt.Fprintf(w, "sink %s: %s\n", r.Sink, r.SinkNote)
		}
		if c := r.SinkCeiling; c != nil && !said["ceiling "+r.Sink] {
			said["ceiling "+r.Sink] = true
			server := "the server's in this process's"
			if c.ServerCPUPerEvent != nil {
				server = fmt.Sprintf("server CPU %.1f µs/ev", *c.ServerCPUPerEvent)
			}
			fmt.Fprintf(w, "sink ceiling %s: %s; client CPU %.1f µs/ev, %s\n", r.Sink, c.Method, c.ClientCPUPerEvent, server)
		}
		if c := r.SinkCeiling; c != nil && c.Stored != nil && *c.Stored < c.Events {
			fmt.Fprintf(w, "sink ceiling %s (%s, ordering %v): the server holds %d events of %d acknowledged\n", r.Sink, r.label(), r.Ordering, *c.Stored, c.Events)
		}
		if r.SinkStored != nil && *r.SinkStored < r.Relay.Events {
			fmt.Fprintf(w, "sink %s (%s, ordering %v): the server holds %d events of %d published\n", r.Sink, r.label(), r.Ordering, *r.SinkStored, r.Relay.Events)
		}
	}
}

func rowsOrDash(n *int64) string {
	if n == nil {
		return "-"
	}
	return strconv.FormatInt(*n, 10)
}

// WriteJSON writes the report to path.
func WriteJSON(path string, rep *Report) error {
	b, err := json.MarshalIndent(map[string]any{"time": time.Now().UTC(), "report": rep}, "", "  ")
	if err != nil {
		return err
	}
	return os.WriteFile(path, append(b, '\n'), 0o644)
}
