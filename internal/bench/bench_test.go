package bench

import (
	"context"
	"strings"
	"testing"
	"time"

	"github.com/outbox-relay/outbox-relay/internal/mytest"
	"github.com/outbox-relay/outbox-relay/internal/pgtest"
)

// A small run of each workload, so that the benchmark keeps working; the
// figures themselves are never asserted.
func TestWorkloadsRun(t *testing.T) {
	if testing.Short() {
		t.Skip("needs PostgreSQL")
	}
	base := Options{
		DSN: pgtest.AdminDSN(), Rows: 3000, Keys: 50, PayloadBytes: 200, BatchSize: 500, Pipeline: 3,
		Layouts: []string{"delete", "mark"}, Orderings: []bool{true}, Partitions: 4, InProcessBroker: true,
		Rates: []int{200}, RowsPerTx: []int{1, 10}, Duration: 500 * time.Millisecond,
	}
	for _, w := range []string{"drain", "steady", "keys"} {
		t.Run(w, func(t *testing.T) {
			o := base
			o.Workload = w
			rep, err := Run(context.Background(), o)
			if err != nil {
				t.Fatal(err)
			}
			for _, r := range rep.Drain {
				if r.Relay.Events != o.Rows || (w == "drain" && r.Ceiling.Events != o.Rows) {
					t.Errorf("%s %s: relay %d, ceiling %d events, want %d", w, r.Layout, r.Relay.Events, r.Ceiling.Events, o.Rows)
				}
				if w == "keys" && (r.OrderHeld == nil || !*r.OrderHeld) {
					t.Errorf("keys=%d: order not held", r.Keys)
				}
			}
			for _, r := range rep.Rates {
				if r.Received != r.Committed || r.Latency.Count != int64(r.Committed) {
					t.Errorf("%s: committed %d, received %d, latencies %d", w, r.Committed, r.Received, r.Latency.Count)
				}
			}
			if w != "steady" && len(rep.Drain) == 0 || w == "steady" && len(rep.Rates) == 0 {
				t.Fatalf("%s: no results", w)
			}
		})
	}
}

// A small drain into each sink other than Kafka: every event reaches the
// server, the server's own client publishes as many for the sink's
// ceiling, and what the run made there is gone afterwards.
func TestDrainEverySink(t *testing.T) {
	if testing.Short() {
		t.Skip("needs PostgreSQL, NATS, RabbitMQ, Redis and Mosquitto")
	}
	for _, s := range Sinks[1:] {
		t.Run(s, func(t *testing.T) {
			o := Options{
				DSN: pgtest.AdminDSN(), Workload: "drain", Sink: s, Rows: 500, Keys: 20, PayloadBytes: 100,
				BatchSize: 100, Pipeline: 2, Layouts: []string{"delete"}, Orderings: []bool{true},
			}
			rep, err := Run(context.Background(), o)
			if err != nil {
				t.Fatal(err)
			}
			if len(rep.Drain) != 1 {
				t.Fatalf("%d results, want 1", len(rep.Drain))
			}
			r := rep.Drain[0]
			if r.Sink != s || r.SinkNote == "" || r.Relay.Events != o.Rows {
				t.Errorf("sink %q (%q), %d events; want %s, a note, %d", r.Sink, r.SinkNote, r.Relay.Events, s, o.Rows)
			}
			if s != "mqtt" && (r.SinkStored == nil || *r.SinkStored != o.Rows) {
				t.Errorf("the server holds %v events, want %d", r.SinkStored, o.Rows)
			}
			// The sink's ceiling: the same count of messages through the
			// server's own client, every one acknowledged (and stored, where
			// the server can tell).
			c := r.SinkCeiling
			if c == nil {
				t.Fatal("no sink ceiling")
			}
			if c.Events != o.Rows || c.CutShort || c.EventsPerSec <= 0 || r.SinkRatio <= 0 || c.Method == "" {
				t.Errorf("sink ceiling: %d events at %.0f/s (cut short %v, method %q), ratio %.2f; want %d", c.Events, c.EventsPerSec, c.CutShort, c.Method, r.SinkRatio, o.Rows)
			}
			if s != "mqtt" && (c.Stored == nil || *c.Stored != o.Rows) {
				t.Errorf("after the sink ceiling the server holds %v events, want %d", c.Stored, o.Rows)
			}
			if (c.ServerCPUPerEvent == nil) != (s == "webhook") {
				t.Errorf("server CPU %v: measured for every server but the in-process receiver", c.ServerCPUPerEvent)
			}
			var out strings.Builder
			Print(&out, rep)
			if !strings.Contains(out.String(), "sink "+s+": "+r.SinkNote) || !strings.Contains(out.String(), "sink ceiling ev/s") ||
				!strings.Contains(out.String(), "sink ceiling "+s+": "+c.Method) {
				t.Errorf("the output does not say where the events went:\n%s", out.String())
			}
		})
	}
}

func TestUnknownSink(t *testing.T) {
	for _, o := range []Options{{Workload: "drain", Sink: "kinesis"}, {Workload: "steady", Sink: "nats"}} {
		if _, err := Run(context.Background(), o); err == nil {
			t.Errorf("%s to %s: no error", o.Workload, o.Sink)
		}
	}
}

// A small drain of each layout and a keys run on MariaDB: every row is
// relayed in order, the relay's statements and transactions are counted,
// and the run's database is gone afterwards.
func TestMySQLRun(t *testing.T) {
	if testing.Short() {
		t.Skip("needs MariaDB")
	}
	mytest.Admin(t) // fails with how to start the server when it is down
	base := Options{
		Driver: "mysql", MySQLDSN: mytest.AdminDSN(), Rows: 3000, Keys: 50, PayloadBytes: 200, BatchSize: 500, Pipeline: 3,
		Layouts: []string{"delete", "mark"}, Orderings: []bool{true}, Partitions: 4, InProcessBroker: true,
	}
	for _, w := range []string{"drain", "keys"} {
		t.Run(w, func(t *testing.T) {
			o := base
			o.Workload = w
			rep, err := Run(context.Background(), o)
			if err != nil {
				t.Fatal(err)
			}
			if len(rep.Drain) != 2 {
				t.Fatalf("%d results, want 2", len(rep.Drain))
			}
			for _, r := range rep.Drain {
				if r.Driver != "mysql" || r.Relay.Events != o.Rows || (w == "drain" && r.Ceiling.Events != o.Rows) {
					t.Errorf("%s %s: driver %s, relay %d, ceiling %d events, want mysql, %d", w, r.Layout, r.Driver, r.Relay.Events, r.Ceiling.Events, o.Rows)
				}
				if w == "keys" && (r.OrderHeld == nil || !*r.OrderHeld) {
					t.Errorf("keys=%d: order not held", r.Keys)
				}
				// A batch is at least a claim and its acknowledgement in one
				// transaction; the count covers every relay connection.
				perBatch := r.Relay.StmtsPerEvent * float64(o.BatchSize)
				if perBatch < 2 || perBatch > 50 || r.Relay.XactsPerEvent*float64(o.BatchSize) < 0.9 {
					t.Errorf("%s %s: %.1f statements and %.2f transactions per batch", w, r.Layout, perBatch, r.Relay.XactsPerEvent*float64(o.BatchSize))
				}
			}
			var out strings.Builder
			Print(&out, rep)
			if !strings.Contains(out.String(), "mariadb CPU µs/ev") {
				t.Errorf("the table does not name MariaDB's CPU:\n%s", out.String())
			}
		})
	}
}

// The run's database is dropped when it ends.
func TestMySQLRunDropsItsDatabase(t *testing.T) {
	if testing.Short() {
		t.Skip("needs MariaDB")
	}
	admin := mytest.Admin(t)
	ctx := context.Background()
	r, err := openMyRun(ctx, mytest.AdminDSN())
	if err != nil {
		t.Fatal(err)
	}
	tb := newMyTable("delete", deleteLayoutMy)
	if err := tb.create(ctx, r.db); err != nil {
		t.Fatal(err)
	}
	if err := tb.fill(ctx, r.db, "bench", 0, 100, 10, 100, true); err != nil {
		t.Fatal(err)
	}
	var n int
	if err := r.db.QueryRowContext(ctx, "SELECT COUNT(*) FROM "+tb.name).Scan(&n); err != nil || n != 100 {
		t.Fatalf("prefilled %d rows (%v), want 100", n, err)
	}
	r.close(ctx)
	if err := admin.QueryRowContext(ctx, "SELECT COUNT(*) FROM information_schema.SCHEMATA WHERE SCHEMA_NAME = ?", r.name).Scan(&n); err != nil || n != 0 {
		t.Errorf("database %s: %d left (%v)", r.name, n, err)
	}
}

func TestUnknownDriver(t *testing.T) {
	for _, o := range []Options{{Workload: "drain", Driver: "oracle"}, {Workload: "steady", Driver: "mysql"}} {
		if _, err := Run(context.Background(), o); err == nil {
			t.Errorf("%s on %s: no error", o.Workload, o.Driver)
		}
	}
}

// The relay under test gathers no process or Go runtime metrics: the
// benchmark polls its registry, and those collectors' cost would count as
// the relay's.
func TestRelayRegistryQuiet(t *testing.T) {
	if testing.Short() {
		t.Skip("needs MariaDB")
	}
	mytest.Admin(t)
	ctx := context.Background()
	r, err := openMyRun(ctx, mytest.AdminDSN())
	if err != nil {
		t.Fatal(err)
	}
	defer r.close(ctx)
	tb := newMyTable("delete", deleteLayoutMy)
	if err := tb.create(ctx, r.db); err != nil {
		t.Fatal(err)
	}
	o := Options{BatchSize: 100, Pipeline: 1}
	a, cleanup, err := openMyRelay(ctx, r, kafkaTarget(kafkaEnv{brokers: []string{"127.0.0.1:1"}}), o, tb, true)
	if err != nil {
		t.Fatal(err)
	}
	defer cleanup()
	mfs, err := a.Registry().Gather()
	if err != nil {
		t.Fatal(err)
	}
	for _, mf := range mfs {
		if strings.HasPrefix(mf.GetName(), "process_") || strings.HasPrefix(mf.GetName(), "go_") {
			t.Errorf("the relay's registry still gathers %s", mf.GetName())
		}
	}
}

// Statements cannot be counted through TLS or compression: such a DSN is
// refused up front rather than measured as zero statements.
func TestCountedDSNRefusesWhatItCannotRead(t *testing.T) {
	for _, dsn := range []string{"root@tcp(127.0.0.1:3306)/?tls=true", "root@tcp(127.0.0.1:3306)/?compress=true", "root@unix(/run/mysqld/mysqld.sock)/"} {
		if _, err := countedDSN(dsn); err == nil {
			t.Errorf("%s: no error", dsn)
		}
	}
	got, err := countedDSN("root@tcp(127.0.0.1:3306)/db?tls=false")
	if err != nil || !strings.Contains(got, countedNet+"(127.0.0.1:3306)/db") {
		t.Errorf("countedDSN = %q, %v", got, err)
	}
}
