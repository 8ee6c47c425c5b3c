package e2e

import (
	"context"
	"fmt"
	"net/url"
	"strings"
	"testing"
	"time"

	"github.com/twmb/franz-go/pkg/kfake"

	"github.com/outbox-relay/outbox-relay/internal/app"
	"github.com/outbox-relay/outbox-relay/internal/config"
	"github.com/outbox-relay/outbox-relay/internal/mytest"
	"github.com/outbox-relay/outbox-relay/internal/pgtest"
	"github.com/outbox-relay/outbox-relay/internal/source"
)

// TestListedDatabases: an entry listing its databases (dsns), one of which
// does not exist. migrate up migrates the others and fails naming it;
// check reports it; run relays the others (each with its own wake-up
// trigger and listener), a table discovered by schema in one of them
// included, while the missing one's sources are stuck with cause
// database_down; status says so.
func TestListedDatabases(t *testing.T) {
	t.Parallel()
	dsnA, poolA := pgtest.NewDB(t)
	dsnB, poolB := pgtest.NewDB(t)
	pgtest.Exec(t, poolA, tenantDDL, "CREATE SCHEMA svc_billing", strings.Replace(tenantDDL, "public.", "svc_billing.", 1))
	pgtest.Exec(t, poolB, tenantDDL)
	u, err := url.Parse(dsnA)
	if err != nil {
		t.Fatal(err)
	}
	missing := "outbox_missing_" + pgtest.Suffix()
	u.Path = "/" + missing
	dsnC := u.String()
	names := map[string]string{}
	for _, d := range []string{dsnA, dsnB, dsnC} {
		p, _ := url.Parse(d)
		names[d] = "shards/" + strings.TrimPrefix(p.Path, "/")
	}
	c := kafkaCluster(t, kfake.SeedTopics(1, "shards"))
	path := writeYAML(t, fmt.Sprintf(`log: {level: warn, format: text}
admin: {listen: "off"}
lease_ttl: 3s
databases:
  shards:
    dsns: [%q, %q, %q]
sinks:
  kafka: {type: kafka, brokers: [%q]}
sources:
  - name: orders
    database: shards
    table: public.outbox
    topic: shards
    poll: {min: 10ms, max: 2s}
    layout: {id: id, payload: payload, key: "{k}", created_at: created_at, order_by: id, state: {mode: delete}}
  - name: services
    database: shards
    discover: {schemas: '^svc_'}
    topic: shards
    poll: {min: 10ms, max: 2s}
    layout: {id: id, payload: payload, key: "{k}", created_at: created_at, order_by: id, state: {mode: delete}}
`, dsnA, dsnB, dsnC, c.ListenAddrs()[0]))

	out, err := runCLI(t, "--config", path, "migrate", "up")
	if err == nil || !strings.Contains(out, names[dsnA]+": up to date") || !strings.Contains(out, names[dsnB]+": up to date") ||
		!strings.Contains(out, names[dsnC]+": FAILED") {
		t.Errorf("migrate up: %v, want the two databases migrated and the missing one failed:\n%s", err, out)
	}
	out, err = runCLI(t, "--config", path, "check", "--skip-sinks")
	if err == nil || !strings.Contains(out, "database "+names[dsnC]+" is out of service") ||
		!strings.Contains(out, "databases."+names[dsnA]+": connected") || !strings.Contains(out, "source orders@"+names[dsnB]+":") {
		t.Errorf("check: %v, want the missing database reported and the others checked:\n%s", err, out)
	}

	cfg, err := config.Load(path)
	if err != nil {
		t.Fatal(err)
	}
	col := collect(t, c.ListenAddrs(), "shards")
	a, stop := runApp(t, cfg)
	stuck := "orders@" + names[dsnC]
	waitFor(t, 15*time.Second, "the sources relaying, the missing database's stuck", func() (bool, string) {
		st := sourceStates(t, a)
		return st["orders@"+names[dsnA]] == app.StateRelaying && st["orders@"+names[dsnB]] == app.StateRelaying &&
			st[stuck] == app.StateStuck+"/"+app.CauseDatabaseDown, fmt.Sprint(st)
	})
	wrote := time.Now()
	pgtest.Exec(t, poolA, `INSERT INTO public.outbox (k, payload) VALUES ('a', '{"n": 1}')`)
	pgtest.Exec(t, poolB, `INSERT INTO public.outbox (k, payload) VALUES ('b', '{"n": 1}')`)
	pgtest.Exec(t, poolA, `INSERT INTO svc_billing.outbox (k, payload) VALUES ('s', '{"n": 1}')`)
	discovered := "services@" + names[dsnA] + ":svc_billing.outbox"
	waitFor(t, 10*time.Second, "the rows of both databases, and of the table discovered in one", func() (bool, string) {
		got := tenantRows(col.records())
		return got["orders@"+names[dsnA]] == 1 && got["orders@"+names[dsnB]] == 1 && got[discovered] == 1, fmt.Sprint(got)
	})
	t.Logf("rows delivered %v after they were written", time.Since(wrote).Round(time.Millisecond))
	st, err := a.Status(context.Background())
	if err != nil {
		t.Fatal(err)
	}
	found := false
	for _, s := range st {
		if s.Source == stuck {
			found = s.Cause == app.CauseDatabaseDown && s.Database == names[dsnC]
		}
	}
	if !found {
		t.Errorf("status does not list %s with cause database_down: %+v", stuck, st)
	}
	stop()

	out, err = runCLI(t, "--config", path, "status")
	if err == nil || !strings.Contains(out, "STUCK: database "+names[dsnC]+" out of service") {
		t.Errorf("status: %v, want %s stuck, its database out of service:\n%s", err, stuck, out)
	}
	out, _ = runCLI(t, "--config", path, "status", "--json")
	if !strings.Contains(out, `"cause": "database_down"`) {
		t.Errorf("status --json: no source with cause database_down:\n%s", out)
	}
}

// TestListedDatabasesMariaDB: two MariaDB databases of one server listed
// by an entry, one template source on both ("{database}.kafka_outbox",
// each table created by the relay). Both deliver; the relay database they
// share on the server holds both sources' records and dead letters, yet
// status lists each source once and each database's dead letters are its
// own.
func TestListedDatabasesMariaDB(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	nameA, dsnA := mytest.NewDatabase(t, "e2e_shop")
	nameB, dsnB := mytest.NewDatabase(t, "e2e_shop")
	relayDB := "relay_" + mytest.Suffix()
	t.Cleanup(func() { mytest.Drop(t, relayDB) })
	c := kafkaCluster(t, kfake.SeedTopics(1, "orders"))
	cfg := &config.Config{
		RelaySchema: relayDB,
		Admin:       config.Admin{Listen: "off"},
		LeaseTTL:    config.Duration(3 * time.Second),
		Shutdown:    config.Shutdown{Timeout: config.Duration(5 * time.Second)},
		Databases:   map[string]config.Database{"shops": {Driver: "mysql", DSNs: []string{dsnA, dsnB}}},
		Sinks:       map[string]config.Sink{"kafka": {Type: "kafka", Brokers: c.ListenAddrs()}},
		Sources: []config.Source{{Name: "shop", Database: "shops", Table: "{database}.kafka_outbox", Preset: "kafka-outbox",
			Poll: config.Poll{Min: config.Duration(10 * time.Millisecond), Max: config.Duration(100 * time.Millisecond)}}},
	}
	cfg.ApplyDefaults()
	col := collect(t, c.ListenAddrs(), "orders")
	a, _ := runApp(t, cfg)
	srcA, srcB := "shop@shops/"+nameA, "shop@shops/"+nameB
	waitFor(t, 20*time.Second, "both sources relaying", func() (bool, string) {
		st := sourceStates(t, a)
		return st[srcA] == app.StateRelaying && st[srcB] == app.StateRelaying, fmt.Sprint(st)
	})
	for _, dsn := range []string{dsnA, dsnB} {
		db := openMySQL(t, dsn)
		for i := range 3 {
			if _, err := db.ExecContext(ctx, "INSERT INTO kafka_outbox (topic, `key`, payload_json) VALUES ('orders', ?, ?)",
				fmt.Sprint("k", i), fmt.Sprintf(`{"n": %d}`, i)); err != nil {
				t.Fatal(err)
			}
		}
	}
	if _, err := openMySQL(t, dsnA).ExecContext(ctx, "INSERT INTO kafka_outbox (topic, `key`, payload_json) VALUES ('orders', 'bad', '{')"); err != nil {
		t.Fatal(err)
	}
	waitFor(t, 20*time.Second, "three rows of each database", func() (bool, string) {
		got := tenantRows(col.records())
		return got[srcA] == 3 && got[srcB] == 3, fmt.Sprint(got)
	})
	var deadA, deadB int
	waitFor(t, 10*time.Second, "the bad row dead-lettered in its own database", func() (bool, string) {
		a1, err1 := a.ListFailed(ctx, "shops/"+nameA, source.DLQFilter{})
		b1, err2 := a.ListFailed(ctx, "shops/"+nameB, source.DLQFilter{})
		deadA, deadB = len(a1), len(b1)
		return err1 == nil && err2 == nil && deadA == 1, fmt.Sprintf("%d and %d (%v, %v)", deadA, deadB, err1, err2)
	})
	if deadB != 0 {
		t.Errorf("the other database lists %d dead letters of the first", deadB)
	}
	st, err := a.Status(ctx)
	if err != nil {
		t.Fatal(err)
	}
	seen := map[string]int{}
	for _, s := range st {
		seen[s.Source]++
	}
	if len(st) != 2 || seen[srcA] != 1 || seen[srcB] != 1 {
		t.Errorf("status lists %v, want %s and %s once each", seen, srcA, srcB)
	}
}
