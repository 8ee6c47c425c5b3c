package e2e

import (
	"encoding/json"
	"fmt"
	"maps"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"slices"
	"strings"
	"testing"
	"time"

	dto "github.com/prometheus/client_model/go"
	"github.com/twmb/franz-go/pkg/kfake"
	"sigs.k8s.io/yaml"

	"github.com/outbox-relay/outbox-relay/internal/app"
	"github.com/outbox-relay/outbox-relay/internal/config"
	"github.com/outbox-relay/outbox-relay/internal/fixtures"
	"github.com/outbox-relay/outbox-relay/internal/pgtest"
)

var metricRef = regexp.MustCompile(`outbox_relay_[a-z_]+`)

// deployKit reads the expressions of the Grafana dashboard's panels (rows'
// panels and template variables included) and of the Prometheus alerts.
func deployKit(t *testing.T) (dashboard []string, alerts map[string]string) {
	t.Helper()
	type panel struct {
		Title   string
		Type    string
		Targets []struct{ Expr string }
		Panels  []json.RawMessage // a collapsed row's panels
	}
	var dash struct {
		Panels     []json.RawMessage
		Templating struct {
			List []struct {
				Type  string
				Query any
			}
		}
	}
	data, err := os.ReadFile("../../deploy/grafana/outbox-relay.json")
	if err != nil {
		t.Fatal(err)
	}
	if err := json.Unmarshal(data, &dash); err != nil {
		t.Fatal(err)
	}
	var walk func([]json.RawMessage)
	walk = func(ps []json.RawMessage) {
		for _, raw := range ps {
			var p panel
			if err := json.Unmarshal(raw, &p); err != nil {
				t.Fatal(err)
			}
			if p.Type == "row" {
				walk(p.Panels)
				continue
			}
			if len(p.Targets) == 0 {
				t.Errorf("panel %q queries nothing", p.Title)
			}
			for _, tg := range p.Targets {
				dashboard = append(dashboard, tg.Expr)
			}
		}
	}
	walk(dash.Panels)
	for _, v := range dash.Templating.List {
		if v.Type == "query" {
			dashboard = append(dashboard, fmt.Sprint(v.Query))
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
	alerts = map[string]string{}
	for _, g := range rules.Groups {
		for _, r := range g.Rules {
			alerts[r.Alert] = r.Expr
		}
	}
	return dashboard, alerts
}

// onlyCaptureWAL are the metrics only a source read by capture wal exports
// (its replication slot's), which this test's relays do not run.
var onlyCaptureWAL = map[string]bool{"outbox_relay_wal_retained_bytes": true, "outbox_relay_wal_slot_lag_bytes": true}

// TestDeployKitNamesLiveMetrics runs two relays on one database, as the
// Kubernetes Deployment does: the lease holder, which publishes a row, and
// a standby. Every metric the Grafana dashboard's panels and the Prometheus
// alerts name must be one they export (histograms through their _bucket,
// _sum and _count series), and the dashboard must show what operators
// watch. Then the alert rules are evaluated by promtool over what the two
// relays export, held for twenty minutes: a healthy pair fires none.
func TestDeployKitNamesLiveMetrics(t *testing.T) {
	t.Parallel()
	dsn, pool := pgtest.NewDB(t)
	pgtest.Exec(t, pool, fixtures.Seed001)
	c := kafkaCluster(t, kfake.SeedTopics(1, "orders", "sepa"))
	pgtest.Exec(t, pool, `INSERT INTO outbox (aggregate_type, aggregate_id, event_type, topic, payload)
VALUES ('Order', gen_random_uuid(), 'order.placed', 'orders', '{}')`)
	src := config.Source{Name: "shop", Table: "public.outbox", Preset: "status"}
	// A payment queue too: its own metrics are in the kit.
	queueSrc := config.Source{Name: "payments", Table: "payments.payment_outbox_pending", Preset: config.QueuePreset, ManageTable: ptrTo(true)}
	holder, _ := runApp(t, baseConfig(dsn, c.ListenAddrs(), src, queueSrc), app.WithStatsInterval(100*time.Millisecond))
	waitFor(t, 20*time.Second, "the row published", func() (bool, string) {
		return published(t, holder, "shop") == 1, "not yet"
	})
	standby, _ := runApp(t, baseConfig(dsn, c.ListenAddrs(), src, queueSrc), app.WithStatsInterval(100*time.Millisecond))
	waitFor(t, 20*time.Second, "the standby's series", func() (bool, string) {
		mfs, err := standby.Registry().Gather()
		return err == nil && slices.ContainsFunc(mfs, func(mf *dto.MetricFamily) bool {
			return mf.GetName() == "outbox_relay_last_claim_timestamp_seconds"
		}), "not yet"
	})
	scrapes := map[string][]*dto.MetricFamily{}
	live := map[string]bool{}
	for instance, a := range map[string]*app.App{"holder": holder, "standby": standby} {
		mfs, err := a.Registry().Gather()
		if err != nil {
			t.Fatal(err)
		}
		scrapes[instance] = mfs
		for _, mf := range mfs {
			live[mf.GetName()] = true
			if mf.GetType() == dto.MetricType_HISTOGRAM {
				for _, sfx := range []string{"_bucket", "_sum", "_count"} {
					live[mf.GetName()+sfx] = true
				}
			}
		}
	}

	dashboard, alerts := deployKit(t)
	exprs := slices.Concat(dashboard, slices.Collect(maps.Values(alerts)))
	names := 0
	for _, e := range exprs {
		refs := metricRef.FindAllString(e, -1)
		if len(refs) == 0 {
			t.Errorf("%q names no relay metric", e)
		}
		for _, n := range refs {
			names++
			if onlyCaptureWAL[n] {
				continue // exported by the holder of a source read by capture wal (TestWALSlotGauges)
			}
			if !live[n] {
				t.Errorf("%q names %s, which the relay does not export (it exports: %s)", e, n, strings.Join(sortedNames(live), ", "))
			}
		}
	}
	t.Logf("%d expressions, %d metric references checked", len(exprs), names)
	for _, want := range []string{"outbox_relay_events_published_total", "outbox_relay_pending_events",
		"outbox_relay_oldest_pending_age_seconds", "outbox_relay_failed_events", "outbox_relay_events_dead_lettered_total",
		"outbox_relay_events_retried_total", "outbox_relay_events_deferred_total", "outbox_relay_sink_circuit_state",
		"outbox_relay_claim_errors_total", "outbox_relay_last_claim_timestamp_seconds"} {
		if !slices.ContainsFunc(dashboard, func(e string) bool { return slices.Contains(metricRef.FindAllString(e, -1), want) }) {
			t.Errorf("no dashboard panel shows %s", want)
		}
	}

	promtool, err := exec.LookPath("promtool")
	if err != nil {
		if os.Getenv("OUTBOX_RELAY_CI") != "" {
			t.Fatal("promtool not found (Debian package prometheus); .ci/run installs it")
		}
		t.Skip("promtool not found: the alert rules are not evaluated over the live metrics")
	}
	alertsFile, err := filepath.Abs("../../deploy/prometheus/alerts.yaml")
	if err != nil {
		t.Fatal(err)
	}
	file := filepath.Join(t.TempDir(), "live_test.yaml")
	if err := os.WriteFile(file, quietTest(alertsFile, scrapes, alerts, time.Now()), 0o644); err != nil {
		t.Fatal(err)
	}
	if out, err := exec.Command(promtool, "test", "rules", file).CombinedOutput(); err != nil {
		data, _ := os.ReadFile(file)
		t.Errorf("an alert fires on a healthy pair of relays: %v\n%s\n%s", err, out, data)
	}
}

// quietHold is how long the scraped values are held before the alerts are
// evaluated: longer than any rule's range and `for:` together.
const quietHold = 30 * time.Minute

// quietTest writes a promtool rules test: the relays' outbox_relay_* series
// as scraped at now, each held for quietHold (a timestamp gauge keeps its
// distance from the scrape), and every alert expected quiet at the end.
func quietTest(rules string, scrapes map[string][]*dto.MetricFamily, alerts map[string]string, now time.Time) []byte {
	var b strings.Builder
	steps := int(quietHold / time.Minute)
	fmt.Fprintf(&b, "rule_files: [%q]\nevaluation_interval: 1m\ntests:\n  - interval: 1m\n    input_series:\n", rules)
	series := func(name string, labels []*dto.LabelPair, instance string, v float64, extra ...string) {
		if strings.HasSuffix(name, "_timestamp_seconds") {
			v += quietHold.Seconds() - float64(now.UnixNano())/1e9
		}
		ls := []string{fmt.Sprintf("instance=%q", instance)}
		for _, l := range labels {
			ls = append(ls, fmt.Sprintf("%s=%q", l.GetName(), l.GetValue()))
		}
		ls = append(ls, extra...)
		fmt.Fprintf(&b, "      - series: %q\n        values: '%gx%d'\n", name+"{"+strings.Join(ls, ",")+"}", v, steps)
	}
	for instance, mfs := range scrapes {
		for _, mf := range mfs {
			n := mf.GetName()
			if !strings.HasPrefix(n, "outbox_relay_") || strings.HasPrefix(n, "outbox_relay_kafka_") {
				continue
			}
			for _, m := range mf.GetMetric() {
				switch mf.GetType() {
				case dto.MetricType_COUNTER:
					series(n, m.GetLabel(), instance, m.GetCounter().GetValue())
				case dto.MetricType_GAUGE:
					series(n, m.GetLabel(), instance, m.GetGauge().GetValue())
				case dto.MetricType_HISTOGRAM:
					h := m.GetHistogram()
					for _, bk := range h.GetBucket() {
						series(n+"_bucket", m.GetLabel(), instance, float64(bk.GetCumulativeCount()), fmt.Sprintf("le=%q", fmt.Sprint(bk.GetUpperBound())))
					}
					series(n+"_bucket", m.GetLabel(), instance, float64(h.GetSampleCount()), `le="+Inf"`)
					series(n+"_sum", m.GetLabel(), instance, h.GetSampleSum())
					series(n+"_count", m.GetLabel(), instance, float64(h.GetSampleCount()))
				}
			}
		}
	}
	fmt.Fprintf(&b, "    alert_rule_test:\n")
	for name := range alerts {
		fmt.Fprintf(&b, "      - {eval_time: %dm, alertname: %s, exp_alerts: []}\n", steps, name)
	}
	return []byte(b.String())
}

func sortedNames(m map[string]bool) []string {
	var out []string
	for n := range m {
		if strings.HasPrefix(n, "outbox_relay_") && !strings.HasPrefix(n, "outbox_relay_kafka_") {
			out = append(out, n)
		}
	}
	slices.Sort(out)
	return out
}
