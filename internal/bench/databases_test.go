package bench

import (
	"context"
	"strings"
	"testing"

	"github.com/jackc/pgx/v5"

	"github.com/outbox-relay/outbox-relay/internal/config"
	"github.com/outbox-relay/outbox-relay/internal/pgtest"
)

// Rows spread over databases: every row in exactly one, the shares at
// most one apart, the first ones the larger.
func TestShare(t *testing.T) {
	t.Parallel()
	for _, c := range []struct{ n, dbs int }{{0, 3}, {1, 3}, {10, 3}, {1_000_000, 10}, {7, 1}, {7, 0}, {5, 7}} {
		total, lo, hi := 0, c.n, 0
		for i := range max(c.dbs, 1) {
			s := share(c.n, i, c.dbs)
			total += s
			lo, hi = min(lo, s), max(hi, s)
			if i > 0 && s > share(c.n, i-1, c.dbs) {
				t.Errorf("share(%d, %d, %d) = %d, more than the one before", c.n, i, c.dbs, s)
			}
		}
		if total != c.n || hi-lo > 1 {
			t.Errorf("%d rows over %d databases: %d in all, shares %d to %d", c.n, c.dbs, total, lo, hi)
		}
	}
}

// The databases a run makes are matched by its discovery pattern, and the
// run's own is not.
func TestMemberNamesMatchThePattern(t *testing.T) {
	t.Parallel()
	own := "outbox_bench_00ab12"
	match, err := (&config.DatabaseDiscover{Pattern: memberPattern(own)}).Matcher()
	if err != nil {
		t.Fatal(err)
	}
	for i := range 3 {
		if name := memberName(own, i); !match(name) {
			t.Errorf("%s is not matched by %s", name, memberPattern(own))
		}
	}
	for _, other := range []string{own, "outbox_bench_00ab13_0001", "postgres"} {
		if match(other) {
			t.Errorf("%s is matched by %s", other, memberPattern(own))
		}
	}
}

func TestCheckDatabases(t *testing.T) {
	t.Parallel()
	for _, c := range []struct {
		o    Options
		want string // "" for no error
	}{
		{Options{Workload: "drain"}, ""},
		{Options{Workload: "steady"}, ""},
		{Options{Workload: "drain", Databases: 10}, ""},
		{Options{Workload: "drain", Databases: -1}, "0 or more"},
		{Options{Workload: "drain", Databases: 2, Driver: "mysql"}, "PostgreSQL only"},
		{Options{Workload: "keys", Databases: 2}, "applies to"},
	} {
		err := checkDatabases(c.o)
		if (err == nil) != (c.want == "") || err != nil && !strings.Contains(err.Error(), c.want) {
			t.Errorf("%+v: %v, want %q", c.o, err, c.want)
		}
	}
}

// A drain over several databases: the ceiling and the relay each drain
// every row of every database, and the databases are gone afterwards.
func TestDrainOverDatabases(t *testing.T) {
	if testing.Short() {
		t.Skip("needs PostgreSQL")
	}
	o := Options{
		Workload: "drain", DSN: pgtest.AdminDSN(), Rows: 3001, Keys: 50, PayloadBytes: 200, BatchSize: 500, Pipeline: 2,
		Layouts: []string{"delete"}, Orderings: []bool{true}, Partitions: 4, InProcessBroker: true,
		Databases: 3, Replicas: 2,
	}
	ctx := context.Background()
	conn, err := pgx.Connect(ctx, o.DSN)
	if err != nil {
		t.Fatal(err)
	}
	defer conn.Close(ctx)
	benchDBs := func() int {
		var n int
		if err := conn.QueryRow(ctx, "SELECT count(*) FROM pg_database WHERE datname ~ '^outbox_bench_[0-9a-f]{6}_[0-9]{4}$'").Scan(&n); err != nil {
			t.Fatal(err)
		}
		return n
	}
	before := benchDBs()
	rep, err := Run(ctx, o)
	if err != nil {
		t.Fatal(err)
	}
	if len(rep.Drain) != 1 {
		t.Fatalf("%d results, want 1", len(rep.Drain))
	}
	r := rep.Drain[0]
	if r.Relay.Events != o.Rows || r.Ceiling.Events != o.Rows || r.Databases != 3 {
		t.Errorf("relay %d, ceiling %d events over %d databases, want %d over 3", r.Relay.Events, r.Ceiling.Events, r.Databases, o.Rows)
	}
	if !strings.Contains(r.label(), "3 databases") {
		t.Errorf("label %q does not name the databases", r.label())
	}
	// Other runs beside this one may make and drop theirs meanwhile.
	if after := benchDBs(); after > before {
		t.Errorf("%d databases of runs before, %d after: the run's are left", before, after)
	}
}

// A run's connections must fit under the server's limit beside those in
// use; the error says how many it needs and how many are free.
func TestCheckRoom(t *testing.T) {
	t.Parallel()
	if got := relayConnections(100, 1, 4); got != 500 {
		t.Errorf("100 databases, max_conns 4: %d connections, want 500 (a listener each)", got)
	}
	if got := relayConnections(10, 2, 6); got != 140 {
		t.Errorf("10 databases, 2 replicas, max_conns 6: %d connections, want 140", got)
	}
	if got := relayConnections(3, 0, 1); got != 6 {
		t.Errorf("no replicas said: %d connections, want those of one (6)", got)
	}
	if err := checkRoom(90, 100, 10, "x"); err != nil {
		t.Errorf("90 more beside 10 under 100: %v", err)
	}
	err := checkRoom(91, 100, 10, "--databases 20")
	if err == nil || !strings.Contains(err.Error(), "91 in all") || !strings.Contains(err.Error(), "90 free") || !strings.HasPrefix(err.Error(), "--databases 20") {
		t.Errorf("91 more beside 10 under 100: %v", err)
	}
}
