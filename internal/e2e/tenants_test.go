package e2e

import (
	"context"
	"encoding/json"
	"fmt"
	"net/url"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgxpool"
	dto "github.com/prometheus/client_model/go"
	"github.com/twmb/franz-go/pkg/kfake"
	"github.com/twmb/franz-go/pkg/kgo"

	"github.com/outbox-relay/outbox-relay/internal/app"
	"github.com/outbox-relay/outbox-relay/internal/config"
	"github.com/outbox-relay/outbox-relay/internal/layout"
	"github.com/outbox-relay/outbox-relay/internal/pgtest"
)

// tenantDDL is each tenant database's outbox.
const tenantDDL = `CREATE TABLE public.outbox (id bigserial PRIMARY KEY, k text NOT NULL, payload jsonb NOT NULL,
  created_at timestamptz NOT NULL DEFAULT clock_timestamp())`

// TestTenantDatabases: a database per tenant, found on the server by a
// pattern. The relay takes up 50 of them, each with its own pool, relay
// schema and source (orders@tenants/<database>), and delivers every row,
// though one cannot be reached at the start (it is stuck, database_down,
// and taken up by the retries once it can be); a database created while
// it runs is taken up and its rows delivered; one
// dropped is let go (its source stopped, its pool closed) while the others
// go on; one made unreachable makes its own source stuck with cause
// database_down, named by /readyz, the state gauge and status, while the
// others keep flowing, and flows again once it is reachable.
func TestTenantDatabases(t *testing.T) {
	// Not parallel: 50 databases take 50 connections of the server's 100.
	const tenants, rowsEach = 50, 4
	ctx := context.Background()
	suffix := pgtest.Suffix()
	prefix := "tnt_" + suffix + "_"
	tdb := newTenantServer(t, prefix, "tpl_"+suffix)
	for i := range tenants {
		tdb.create(t, i)
	}
	for i := range tenants {
		tdb.insert(t, i, rowsEach)
	}

	cluster := kafkaCluster(t, kfake.SeedTopics(1, "tenants"))
	brokers := cluster.ListenAddrs()
	cfg := &config.Config{
		Admin:    config.Admin{Listen: "127.0.0.1:0"},
		LeaseTTL: config.Duration(6 * time.Second),
		Shutdown: config.Shutdown{Timeout: config.Duration(5 * time.Second)},
		Databases: map[string]config.Database{"tenants": {DSN: pgtest.AdminDSN(), MaxConns: 1,
			Discover: &config.DatabaseDiscover{Pattern: prefix + "[0-9][0-9]", Interval: config.Duration(time.Second)}}},
		Sinks: map[string]config.Sink{"kafka": {Type: "kafka", Brokers: brokers}},
		Sources: []config.Source{{Name: "orders", Database: "tenants", Table: "public.outbox", Topic: "tenants",
			Layout: tenantLayout(), Notify: "off", Pipeline: 1,
			Poll: config.Poll{Min: config.Duration(10 * time.Millisecond), Max: config.Duration(200 * time.Millisecond)}}},
	}
	cfg.ApplyDefaults()
	// One tenant cannot be reached at the start: the others start.
	const late = 5
	tdb.exec(t, "ALTER DATABASE "+tdb.name(late)+" ALLOW_CONNECTIONS false")
	col := collect(t, brokers, "tenants")
	start := time.Now()
	a, _ := runApp(t, cfg)
	waitFor(t, 40*time.Second, "every reachable tenant's rows", func() (bool, string) {
		return tenantRows(col.records()).complete(prefix, tenants, rowsEach, late)
	})
	t.Logf("%d databases: %d rows delivered %v after the start", tenants-1, (tenants-1)*rowsEach, time.Since(start).Round(time.Millisecond))
	lateSource := "orders@tenants/" + tdb.name(late)
	if s := sourceStates(t, a)[lateSource]; s != app.StateStuck+"/"+app.CauseDatabaseDown {
		t.Errorf("a tenant unreachable at the start: %s is %q, want stuck/database_down", lateSource, s)
	}
	// Reachable, it is taken up by the retries.
	tdb.exec(t, "ALTER DATABASE "+tdb.name(late)+" ALLOW_CONNECTIONS true")
	waitFor(t, 20*time.Second, "the late tenant's rows", func() (bool, string) {
		return tenantRows(col.records()).complete(prefix, tenants, rowsEach)
	})

	// A database created while the relay runs is taken up.
	tdb.create(t, tenants)
	tdb.insert(t, tenants, rowsEach)
	waitFor(t, 15*time.Second, "the new tenant's rows", func() (bool, string) {
		return tenantRows(col.records()).complete(prefix, tenants+1, rowsEach)
	})

	// A database dropped is let go: its source stops, its pool is closed.
	const dropped, down = 7, 3
	tdb.drop(t, dropped)
	since := time.Now()
	gone := "orders@tenants/" + tdb.name(dropped)
	waitFor(t, 15*time.Second, "the dropped tenant's source stopped", func() (bool, string) {
		st := sourceStates(t, a)
		_, running := st[gone]
		return !running && !a.HasDatabase("tenants/"+tdb.name(dropped)), fmt.Sprintf("%s: %q", gone, st[gone])
	})
	t.Logf("a dropped database let go %v after the drop", time.Since(since).Round(time.Millisecond))
	if n := seriesOf(t, a, gone); n > 0 {
		t.Errorf("the stopped source still exports %d series", n)
	}
	// The others are undisturbed: every one relaying, new rows delivered.
	st := sourceStates(t, a)
	for i := range tenants + 1 {
		if name := "orders@tenants/" + tdb.name(i); i != dropped && st[name] != app.StateRelaying {
			t.Errorf("after the drop, %s is %q, want relaying", name, st[name])
		}
	}
	for i := range tenants + 1 {
		if i != dropped {
			tdb.insert(t, i, 1)
		}
	}
	waitFor(t, 15*time.Second, "rows written after the drop", func() (bool, string) {
		return tenantRows(col.records()).complete(prefix, tenants+1, rowsEach+1, dropped)
	})

	// A database made unreachable: its source is stuck, named as such;
	// the others keep flowing.
	tdb.exec(t, "ALTER DATABASE "+tdb.name(down)+" ALLOW_CONNECTIONS false",
		"SELECT pg_terminate_backend(pid) FROM pg_stat_activity WHERE datname = '"+tdb.name(down)+"'")
	since = time.Now()
	stuck := "orders@tenants/" + tdb.name(down)
	waitFor(t, 15*time.Second, "the unreachable tenant's source stuck", func() (bool, string) {
		s := sourceStates(t, a)[stuck]
		return s == app.StateStuck+"/"+app.CauseDatabaseDown, s
	})
	t.Logf("an unreachable database named as its source's cause %v after", time.Since(since).Round(time.Millisecond))
	// /readyz fails naming the source (database_down) and its database,
	// and nothing else.
	code, body := httpGet(t, "http://"+a.AdminAddr()+"/readyz")
	var ready struct {
		Checks []struct{ Name, Error string }
	}
	if err := json.Unmarshal([]byte(body), &ready); err != nil || code != 503 {
		t.Fatalf("/readyz = %d %s (%v), want 503", code, body, err)
	}
	failed := map[string]string{}
	for _, c := range ready.Checks {
		failed[c.Name] = c.Error
	}
	if len(failed) != 2 || !strings.Contains(failed["source:"+stuck], "stuck (database_down): database tenants/"+tdb.name(down)) ||
		failed["database:tenants/"+tdb.name(down)] == "" {
		t.Errorf("/readyz fails %v, want %s (database_down) and its database alone", failed, stuck)
	}
	all, err := a.Status(ctx)
	if err != nil {
		t.Fatal(err)
	}
	for _, s := range all {
		if s.Source == stuck && (s.Cause != app.CauseDatabaseDown || !strings.Contains(s.Reason, "tenants/"+tdb.name(down))) {
			t.Errorf("status of %s: %s %s %q, want cause database_down naming its database", stuck, s.State, s.Cause, s.Reason)
		}
	}
	for i := range tenants + 1 {
		if i != dropped && i != down {
			tdb.insert(t, i, 1)
		}
	}
	waitFor(t, 15*time.Second, "rows of the others while one is unreachable", func() (bool, string) {
		return tenantRows(col.records()).complete(prefix, tenants+1, rowsEach+2, dropped, down)
	})
	st = sourceStates(t, a)
	for i := range tenants + 1 {
		if name := "orders@tenants/" + tdb.name(i); i != dropped && i != down && st[name] != app.StateRelaying {
			t.Errorf("while %s is unreachable, %s is %q, want relaying", tdb.name(down), name, st[name])
		}
	}

	// Reachable again, it flows again.
	tdb.exec(t, "ALTER DATABASE "+tdb.name(down)+" ALLOW_CONNECTIONS true")
	tdb.insert(t, down, 1)
	waitFor(t, 20*time.Second, "the tenant's rows once reachable again", func() (bool, string) {
		return tenantRows(col.records()).complete(prefix, tenants+1, rowsEach+2, dropped)
	})
	t.Logf("the whole scenario took %v", time.Since(start).Round(time.Millisecond))
}

func tenantLayout() layout.Spec {
	return layout.Spec{ID: "id", Payload: "payload", Key: "{k}", CreatedAt: "created_at", OrderBy: "id",
		State: layout.State{Mode: "delete"}}
}

// tenantServer creates tenant databases from a template, and drops them
// all when the test ends.
type tenantServer struct {
	prefix, template string
	admin            *pgxpool.Pool
	mu               sync.Mutex
	made             []string
}

func newTenantServer(t *testing.T, prefix, template string) *tenantServer {
	t.Helper()
	admin, err := pgxpool.New(context.Background(), pgtest.AdminDSN())
	if err != nil {
		t.Fatal(err)
	}
	s := &tenantServer{prefix: prefix, template: template, admin: admin}
	t.Cleanup(func() {
		ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
		defer cancel()
		s.mu.Lock()
		defer s.mu.Unlock()
		for _, name := range append(s.made, s.template) {
			if _, err := admin.Exec(ctx, "DROP DATABASE IF EXISTS "+name+" WITH (FORCE)"); err != nil {
				t.Errorf("drop %s: %v", name, err)
			}
		}
		admin.Close()
	})
	s.exec(t, "CREATE DATABASE "+s.template)
	conn, err := pgx.Connect(context.Background(), dsnOf(t, s.template))
	if err != nil {
		t.Fatal(err)
	}
	defer conn.Close(context.Background())
	if _, err := conn.Exec(context.Background(), tenantDDL); err != nil {
		t.Fatal(err)
	}
	return s
}

func (s *tenantServer) name(i int) string { return fmt.Sprintf("%s%02d", s.prefix, i) }

func (s *tenantServer) exec(t *testing.T, sql ...string) {
	t.Helper()
	for _, q := range sql {
		if _, err := s.admin.Exec(context.Background(), q); err != nil {
			t.Fatalf("%s: %v", q, err)
		}
	}
}

// create makes tenant database i, a copy of the template.
func (s *tenantServer) create(t *testing.T, i int) {
	t.Helper()
	s.mu.Lock()
	s.made = append(s.made, s.name(i))
	s.mu.Unlock()
	s.exec(t, "CREATE DATABASE "+s.name(i)+" TEMPLATE "+s.template)
}

func (s *tenantServer) drop(t *testing.T, i int) {
	t.Helper()
	s.exec(t, "DROP DATABASE "+s.name(i)+" WITH (FORCE)")
}

// insert writes n rows into tenant database i, each naming its tenant.
func (s *tenantServer) insert(t *testing.T, i, n int) {
	t.Helper()
	conn, err := pgx.Connect(context.Background(), dsnOf(t, s.name(i)))
	if err != nil {
		t.Fatal(err)
	}
	defer conn.Close(context.Background())
	_, err = conn.Exec(context.Background(), `INSERT INTO public.outbox (k, payload)
SELECT 'k' || g, jsonb_build_object('tenant', $1::text, 'n', g) FROM generate_series(1, $2) g`, s.name(i), n)
	if err != nil {
		t.Fatalf("insert into %s: %v", s.name(i), err)
	}
}

func dsnOf(t *testing.T, db string) string {
	t.Helper()
	u, err := url.Parse(pgtest.AdminDSN())
	if err != nil {
		t.Fatal(err)
	}
	u.Path = "/" + db
	return u.String()
}

// tenantCounts are the distinct events delivered, by source.
type tenantCounts map[string]int

func tenantRows(recs []*kgo.Record) tenantCounts {
	seen := map[string]bool{}
	out := tenantCounts{}
	for _, r := range recs {
		src, _ := header(r, "outbox_source")
		id, _ := header(r, "event_id")
		if !seen[src+"\x00"+id] {
			seen[src+"\x00"+id] = true
			out[src]++
		}
	}
	return out
}

// complete reports whether each of the n tenants but skip has delivered
// want events, and says which have not.
func (c tenantCounts) complete(prefix string, n, want int, skip ...int) (bool, string) {
	var short []string
	for i := range n {
		if containsInt(skip, i) {
			continue
		}
		src := fmt.Sprintf("orders@tenants/%s%02d", prefix, i)
		if c[src] != want {
			short = append(short, fmt.Sprintf("%s: %d", src, c[src]))
		}
	}
	if len(short) > 5 {
		short = append(short[:5], fmt.Sprintf("and %d more", len(short)-5))
	}
	return len(short) == 0, fmt.Sprintf("want %d each; short: %s", want, strings.Join(short, ", "))
}

func containsInt(xs []int, x int) bool {
	for _, v := range xs {
		if v == x {
			return true
		}
	}
	return false
}

// sourceStates reads the outbox_relay_source_state gauge: each source's
// "state" or "state/cause".
func sourceStates(t *testing.T, a *app.App) map[string]string {
	t.Helper()
	mfs, err := a.Registry().Gather()
	if err != nil {
		t.Fatal(err)
	}
	out := map[string]string{}
	for _, mf := range mfs {
		if mf.GetName() != "outbox_relay_source_state" {
			continue
		}
		for _, m := range mf.GetMetric() {
			if m.GetGauge().GetValue() != 1 {
				continue
			}
			l := labels(m)
			out[l["source"]] = l["state"]
			if l["cause"] != "" {
				out[l["source"]] += "/" + l["cause"]
			}
		}
	}
	return out
}

func labels(m *dto.Metric) map[string]string {
	out := map[string]string{}
	for _, l := range m.GetLabel() {
		out[l.GetName()] = l.GetValue()
	}
	return out
}

// seriesOf counts the series labelled with source.
func seriesOf(t *testing.T, a *app.App, source string) int {
	t.Helper()
	mfs, err := a.Registry().Gather()
	if err != nil {
		t.Fatal(err)
	}
	n := 0
	for _, mf := range mfs {
		for _, m := range mf.GetMetric() {
			if labels(m)["source"] == source {
				n++
			}
		}
	}
	return n
}
