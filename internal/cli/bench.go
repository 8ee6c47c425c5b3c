package cli

import (
	"fmt"
	"log/slog"
	"os"
	"strings"
	"time"

	"github.com/spf13/cobra"

	"github.com/outbox-relay/outbox-relay/internal/bench"
	"github.com/outbox-relay/outbox-relay/internal/demo"
	presets "github.com/outbox-relay/outbox-relay/internal/layout"
)

func newBench(g *globals) *cobra.Command {
	o := bench.Options{}
	var layout, ordering, delivery, jsonPath, cpuProfile string
	cmd := &cobra.Command{
		Use:   "bench [drain|steady|sparse|keys|idle|handover]",
		Short: "Measure the relay against the database's own ceiling, in the same run",
		Long: `bench creates its own schema in the PostgreSQL at --dsn (default $DATABASE_URL,
else the local server), prefills it with COPY, measures the ceiling (the
relay's own claim and acknowledge statements in a loop, no broker) and then
the relay publishing to Kafka (an in-process broker unless --brokers), and
reports events/s, the ratio relay/ceiling, CPU, WAL and transactions per
event. The schema is dropped afterwards.

Workloads (the argument; default drain):
  drain   prefill --rows rows (200-byte JSON payloads over --keys keys), then
          relay them all: events/s and the ratio to the ceiling measured in
          the same run, relay CPU per 1,000 events, peak memory.
  steady  producers commit at fixed rates (1 and 10 rows per transaction) for
          a fixed time while the relay runs: commit-to-publish latency
          p50/p99/p999 and the highest rate whose backlog does not grow.
  sparse  10 events a second: the wake-up path's latency, and the queries a
          second an idle source costs.
  keys    one hot key against many keys, ordering on: events/s and whether
          every key's events arrived in order.
  idle    --sources idle outbox tables (a schema each, one discovery rule),
          all held by the relay: its statements a second, in all, per
          source and by kind, over --duration (default here 30s). With
          --databases N, N databases instead, an idle source each, found
          by one entry's discovery pattern: statements and transactions a
          second in all and per database, and the connections each keeps.
  handover --replicas R (2 or more) relay processes (this executable's run
          command, one configuration file) on an idle table split into
          --shards buckets (in each of --databases): once the buckets are
          spread evenly, the replica holding the most is stopped with
          SIGTERM, and later (replaced, spread again) one is killed with
          SIGKILL; for each, the time from the signal until every bucket
          it held is held by another replica (the leases table's
          acquired_at, on the server's clock), --repeat times.

With --sink, the drain workload's relay publishes to another sink type on
its local server (or --sink-url): nats (a JetStream stream made for the run),
rabbitmq (a direct exchange and a durable queue), redis (a stream), mqtt
(QoS 1, no subscriber) or webhook (an HTTP server in this same process that
answers 200, whose CPU then counts as the relay's). What the run made on the
server is deleted afterwards. Beside the relay's rate the report gives the
sink's ceiling: the drain's messages (same count, payloads and keys)
published to the same server by its own client, pipelined as a careful user
would (publisher confirms with 256 outstanding, JetStream PublishAsync with
1,024 pending, XADD pipelines, QoS 1 with 256 in flight, keep-alive HTTP 16
at once), and the ratio relay/sink ceiling.

With --driver mysql, drain and keys run on MySQL or MariaDB at --mysql-dsn
instead: the run creates a database of its own there (dropped afterwards),
prefills with LOAD DATA LOCAL INFILE, and reports the mariadbd process's CPU
and InnoDB's redo bytes per event (both server-wide) in place of
PostgreSQL's. Layout delete is a table of the run's own; layout mark is
seed 004's kafka_outbox (preset kafka-outbox), created by the relay.

With --layout queue, drain runs on seed 003's payment queue (preset
payment-queue, participants = --keys, each with its own sequence): the
ceiling is the queue's claim (delete + DISPATCHING attempt) and outcome
(DISPATCHED attempt) statements in a loop; the relay dispatches with per
participant strict order, so a claim takes one payment per participant.

With --preset (a comma list, or all), drain measures presets' tables in
place of --layout, each made as its team wrote it (seed 000's for
published-flag, 001's for status, 002's Prisma model for prisma, the
relay's own migrations for kafka-outbox and payment-queue; on MySQL the
seeds' translations) and prefilled with --rows pending rows over --keys
keys (the column the preset keys and orders by), 200-byte JSON payloads.
--driver mysql has every preset but payment-queue; all means those.

With --history N, each drain's table first gets N rows already delivered,
older than the backlog and before it in the claim's order, loaded in the
state the relay leaves them in (published flag and time, status published,
kafka_outbox's push_completed_at with its batch id and claim time), as a
table that keeps its delivered rows holds after months of use. The
ceiling loop and the relay both run with them there; the report shows the
history's size. Tables whose rows are deleted on delivery (layout delete,
presets delete and payment-queue) have none, and the report says so.

With --no-analyze, each drain runs twice: first on a table never
analyzed (PostgreSQL: autovacuum_enabled = false; MySQL and MariaDB:
STATS_PERSISTENT=1, STATS_AUTO_RECALC=0, so InnoDB keeps the empty
table's statistics), then on a fresh table of the same shape analyzed
after its prefill (VACUUM ANALYZE, ANALYZE TABLE), with the ceiling as
usual. The report adds the first rate, its ratio to the second
(not/analyzed) and the row counts the statistics held as each relay
started. A claim whose plan depends on statistics can be very slow:
every ceiling loop and relay drain stops after --max-time, and a drain
cut short reports the rows drained over the time taken, marked *.

With --databases N, drain makes N databases on the PostgreSQL server
(named after the run's own, dropped afterwards), the table in each with
its share of the rows, and runs the relay with one entry listing them
all (databases.bench.dsns, as a database per tenant is run). The ceiling
is the same loop on every database at once, its rows summed; with
--replicas the replicas share every database's leases. A run that could
open more connections than the server has free (max_conns, --max-conns,
and a listening connection per database and replica) is refused before
it starts, so that it does not take the server's last connections.`,
		Args: cobra.MaximumNArgs(1),
		RunE: func(cmd *cobra.Command, args []string) error {
			o.Workload = "drain"
			if len(args) == 1 {
				o.Workload = args[0]
			}
			if o.Workload == "idle" && !cmd.Flags().Changed("duration") {
				o.Duration = 30 * time.Second
			}
			if o.DSN == "" {
				o.DSN = os.Getenv("DATABASE_URL")
			}
			if o.DSN == "" {
				o.DSN = demo.DefaultDSN
			}
			o.Layouts = []string{layout}
			if layout == "both" {
				o.Layouts = []string{"delete", "mark"}
			}
			if len(o.Presets) > 0 && cmd.Flags().Changed("layout") {
				return fmt.Errorf("--layout and --preset both name the tables to drain: give one")
			}
			switch ordering {
			case "on":
				o.Orderings = []bool{true}
			case "off":
				o.Orderings = []bool{false}
			default:
				o.Orderings = []bool{true, false}
			}
			switch delivery {
			case "both":
				o.Deliveries = []string{"at_least_once", "exactly_once"}
			default:
				o.Deliveries = []string{delivery}
			}
			o.Progress = g.stderr
			o.Logger = slog.New(slog.NewTextHandler(g.stderr, &slog.HandlerOptions{Level: slog.LevelWarn}))
			if cpuProfile != "" {
				f, err := os.Create(cpuProfile)
				if err != nil {
					return err
				}
				defer f.Close()
				o.RelayProfile = f
			}
			rs, err := bench.Run(cmd.Context(), o)
			bench.Print(g.stdout, rs)
			if err != nil {
				return err
			}
			if jsonPath != "" {
				return bench.WriteJSON(jsonPath, rs)
			}
			return nil
		},
	}
	f := cmd.Flags()
	f.StringVar(&o.DSN, "dsn", "", "PostgreSQL DSN (default $DATABASE_URL, else the local server)")
	f.StringVar(&o.Driver, "driver", "postgres", "drain and keys: the database to measure: postgres|mysql")
	f.StringVar(&o.MySQLDSN, "mysql-dsn", bench.DefaultMySQLDSN, "--driver mysql: the MySQL or MariaDB server (go-sql-driver DSN)")
	f.IntVar(&o.Rows, "rows", 1_000_000, "rows to prefill")
	f.IntVar(&o.History, "history", 0, "drain: rows already delivered in the table before the backlog (tables that keep delivered rows; not delete)")
	f.IntVar(&o.Keys, "keys", 10_000, "distinct keys")
	f.IntVar(&o.Sources, "sources", 1000, "idle: how many idle sources (a schema and an outbox table each)")
	f.IntVar(&o.Replicas, "replicas", 1, "drain (PostgreSQL): relay processes sharing the source, in this process; handover: relay processes, each a process of its own")
	f.IntVar(&o.Shards, "shards", 1, "drain and handover: buckets the source is split into (sources[].shards); drain on PostgreSQL and MySQL")
	f.DurationVar(&o.LeaseTTL, "lease-ttl", 0, "handover: the relay's lease_ttl (default its own, 15s)")
	f.IntVar(&o.Databases, "databases", 0, "drain and idle (PostgreSQL): databases made on the server, relayed as one entry (drain: listing them, each with its share of the rows; idle: discovering them, a source each)")
	f.IntVar(&o.MaxConns, "max-conns", 0, "the relay's max_conns for each database (default: drain shards × pipeline + 4; idle the relay's default)")
	f.IntVar(&o.PayloadBytes, "payload-bytes", 200, "payload size")
	f.IntVar(&o.BatchSize, "batch-size", 1000, "claim batch size")
	f.IntVar(&o.Pipeline, "pipeline", 2, "batches in flight")
	f.IntVar(&o.Partitions, "partitions", 12, "partitions of the benchmark topic (in-process broker)")
	f.StringSliceVar(&o.Brokers, "brokers", nil, "a real Kafka cluster (topic \"bench\" must exist)")
	f.StringVar(&layout, "layout", "both", "delete, mark, both, or queue (seed 003's payment queue, drain only)")
	f.StringSliceVar(&o.Presets, "preset", nil, "drain: presets' tables in place of --layout: "+strings.Join(presets.PresetNames(), ", ")+", or all")
	f.BoolVar(&o.NoAnalyze, "no-analyze", false, "drain: each table first never analyzed (autovacuum off), then a fresh one analyzed; report both and their ratio")
	f.DurationVar(&o.MaxTime, "max-time", bench.DefaultMaxTime, "drain: cut each ceiling loop and relay drain short after this long, reporting the rate of what was drained")
	f.StringVar(&ordering, "ordering", "both", "on, off or both")
	f.IntVar(&o.Repeat, "repeat", 1, "drain: run each measurement this many times, interleaved; handover: stop a replica with each signal this many times")
	f.StringVar(&delivery, "delivery", "at_least_once", "drain to Kafka: at_least_once, exactly_once or both (Kafka transactions)")
	f.StringVar(&jsonPath, "json", "", "also write the results as JSON to this file")
	f.IntSliceVar(&o.Rates, "rates", []int{1000, 2500, 5000, 10000, 20000, 40000}, "steady: rates to try, in events/s, until one is not sustainable")
	f.IntSliceVar(&o.RowsPerTx, "rows-per-tx", []int{1, 10}, "steady: events per producer transaction")
	f.DurationVar(&o.Duration, "duration", 10*time.Second, "steady and sparse: how long producers write at each rate; idle: how long statements are counted")
	f.StringVar(&cpuProfile, "cpuprofile", "", "write a CPU profile of the first relay phase (pprof) to this file")
	f.BoolVar(&o.InProcessBroker, "in-process-broker", false, "run the in-memory broker inside this process")
	f.StringVar(&o.Sink, "sink", "kafka", "drain: the sink to publish to: "+strings.Join(bench.Sinks, "|"))
	f.StringVar(&o.SinkURL, "sink-url", "", "drain: the server of --sink other than kafka and webhook (default the local one)")
	hideConfigFlag(cmd)
	return cmd
}
