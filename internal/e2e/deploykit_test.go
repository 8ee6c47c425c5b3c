package e2e

import (
	"encoding/json"
	"os"
	"regexp"
	"strings"
	"testing"
	"time"

	"github.com/twmb/franz-go/pkg/kfake"
	"sigs.k8s.io/yaml"

	"github.com/outbox-relay/outbox-relay/internal/app"
	"github.com/outbox-relay/outbox-relay/internal/config"
	"github.com/outbox-relay/outbox-relay/internal/fixtures"
	"github.com/outbox-relay/outbox-relay/internal/pgtest"
)

var metricRef = regexp.MustCompile(`outbox_relay_[a-z_]+`)

// TestDeployKitNamesLiveMetrics: every metric the Grafana dashboard's
// panels and the Prometheus alerts name is one a running relay exports
// (histograms through their _bucket, _sum and _count series).
func TestDeployKitNamesLiveMetrics(t *testing.T) {
	t.Parallel()
	dsn, pool := pgtest.NewDB(t)
	pgtest.Exec(t, pool, fixtures.Seed001)
	c := kafkaCluster(t, kfake.SeedTopics(1, "orders"))
	pgtest.Exec(t, pool, `INSERT INTO outbox (aggregate_type, aggregate_id, event_type, topic, payload)
VALUES ('Order', gen_random_uuid(), 'order.placed', 'orders', '{}')`)
	a, _ := runApp(t, baseConfig(dsn, c.ListenAddrs(), config.Source{Name: "shop", Table: "public.outbox", Preset: "status"}),
		app.WithStatsInterval(100*time.Millisecond))
	waitFor(t, 20*time.Second, "the row published", func() (bool, string) {
		return published(t, a, "shop") == 1, "not yet"
	})
	mfs, err := a.Registry().Gather()
	if err != nil {
		t.Fatal(err)
	}
	live := map[string]bool{}
	for _, mf := range mfs {
		live[mf.GetName()] = true
		if mf.GetType().String() == "HISTOGRAM" {
			for _, sfx := range []string{"_bucket", "_sum", "_count"} {
				live[mf.GetName()+sfx] = true
			}
		}
	}

	var exprs []string
	var dash struct {
		Panels []struct {
			Title   string
			Targets []struct{ Expr string }
		}
	}
	data, err := os.ReadFile("../../deploy/grafana/outbox-relay.json")
	if err != nil {
		t.Fatal(err)
	}
	if err := json.Unmarshal(data, &dash); err != nil {
		t.Fatal(err)
	}
	for _, p := range dash.Panels {
		if len(p.Targets) == 0 {
			t.Errorf("panel %q queries nothing", p.Title)
		}
		for _, tg := range p.Targets {
			exprs = append(exprs, tg.Expr)
		}
	}
	var rules struct {
		Groups []struct {
			Rules []struct{ Alert, Expr string }
		}
	}
	data, err = os.ReadFile("../../deploy/prometheus/alerts.yaml")
	if err != nil {
		t.Fatal(err)
	}
	if err := yaml.Unmarshal(data, &rules); err != nil {
		t.Fatal(err)
	}
	for _, g := range rules.Groups {
		for _, r := range g.Rules {
			exprs = append(exprs, r.Expr)
		}
	}
	names := 0
	for _, e := range exprs {
		refs := metricRef.FindAllString(e, -1)
		if len(refs) == 0 {
			t.Errorf("%q names no relay metric", e)
		}
		for _, n := range refs {
			names++
			if !live[n] {
				t.Errorf("%q names %s, which the relay does not export (it exports: %s)", e, n, strings.Join(sortedNames(live), ", "))
			}
		}
	}
	t.Logf("%d expressions, %d metric references, all exported", len(exprs), names)
}

func sortedNames(m map[string]bool) []string {
	var out []string
	for n := range m {
		if strings.HasPrefix(n, "outbox_relay_") && !strings.HasPrefix(n, "outbox_relay_kafka_") {
			out = append(out, n)
		}
	}
	return out
}
