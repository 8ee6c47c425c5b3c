// Package deploy holds the deployment kit (Dockerfile, Kubernetes
// manifests, Prometheus alerts, Grafana dashboard, systemd unit); its tests
// check each piece against the relay it deploys. The metric names the alerts
// and the dashboard use are checked against a live relay by
// internal/e2e's TestDeployKitNamesLiveMetrics.
package deploy

import (
	"bufio"
	"bytes"
	"fmt"
	"net"
	"net/http"
	"net/http/httptest"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"slices"
	"strconv"
	"strings"
	"testing"
	"time"

	appsv1 "k8s.io/api/apps/v1"
	corev1 "k8s.io/api/core/v1"
	policyv1 "k8s.io/api/policy/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	sigsjson "sigs.k8s.io/json"
	"sigs.k8s.io/yaml"

	"github.com/outbox-relay/outbox-relay/internal/admin"
	"github.com/outbox-relay/outbox-relay/internal/config"
)

// kinds are the API types the kit's manifests may be, by kind.
var kinds = map[string]func() any{
	"ConfigMap":           func() any { return &corev1.ConfigMap{} },
	"Secret":              func() any { return &corev1.Secret{} },
	"Service":             func() any { return &corev1.Service{} },
	"Deployment":          func() any { return &appsv1.Deployment{} },
	"PodDisruptionBudget": func() any { return &policyv1.PodDisruptionBudget{} },
}

type manifests struct {
	cm     *corev1.ConfigMap
	secret *corev1.Secret
	dep    *appsv1.Deployment
	svc    *corev1.Service
	pdb    *policyv1.PodDisruptionBudget
}

// load decodes every manifest kustomization.yaml lists, each strictly into
// its Kubernetes API type (a misspelt or misplaced field is an error), and
// checks that the kustomization lists every manifest of the directory.
func load(t *testing.T) *manifests {
	t.Helper()
	var kust struct {
		APIVersion string   `json:"apiVersion"`
		Kind       string   `json:"kind"`
		Resources  []string `json:"resources"`
	}
	data, err := os.ReadFile("kubernetes/kustomization.yaml")
	if err != nil {
		t.Fatal(err)
	}
	decodeStrict(t, "kustomization.yaml", data, &kust)
	if kust.Kind != "Kustomization" {
		t.Fatalf("kustomization.yaml: kind %q", kust.Kind)
	}
	files, _ := filepath.Glob("kubernetes/*.yaml")
	for _, f := range files {
		if b := filepath.Base(f); b != "kustomization.yaml" && !slices.Contains(kust.Resources, b) {
			t.Errorf("kubernetes/%s is not in kustomization.yaml's resources: kubectl apply -k leaves it out", b)
		}
	}
	m := &manifests{}
	for _, file := range kust.Resources {
		data, err := os.ReadFile(filepath.Join("kubernetes", file))
		if err != nil {
			t.Fatal(err)
		}
		var tm metav1.TypeMeta
		if err := yaml.Unmarshal(data, &tm); err != nil {
			t.Fatalf("%s: %v", file, err)
		}
		newObj, ok := kinds[tm.Kind]
		if !ok {
			t.Fatalf("%s: kind %q, which this test does not know", file, tm.Kind)
		}
		obj := newObj()
		decodeStrict(t, file, data, obj)
		switch o := obj.(type) {
		case *corev1.ConfigMap:
			m.cm = o
		case *corev1.Secret:
			m.secret = o
		case *appsv1.Deployment:
			m.dep = o
		case *corev1.Service:
			m.svc = o
		case *policyv1.PodDisruptionBudget:
			m.pdb = o
		}
	}
	if m.cm == nil || m.secret == nil || m.dep == nil || m.svc == nil || m.pdb == nil {
		t.Fatalf("want a ConfigMap, a Secret, a Deployment, a Service and a PodDisruptionBudget: %+v", m)
	}
	return m
}

// decodeStrict decodes a manifest as the API server does with strict field
// validation: field names are case-sensitive, and an unknown or duplicate
// field is an error (sigs.k8s.io/yaml's own strict mode goes through
// encoding/json, which matches field names in any case).
func decodeStrict(t *testing.T, file string, data []byte, into any) {
	t.Helper()
	js, err := yaml.YAMLToJSONStrict(data)
	if err != nil {
		t.Fatalf("%s: %v", file, err)
	}
	strict, err := sigsjson.UnmarshalStrict(js, into, sigsjson.DisallowDuplicateFields, sigsjson.DisallowUnknownFields)
	if err != nil {
		t.Fatalf("%s: %v", file, err)
	}
	for _, e := range strict {
		t.Errorf("%s: %v", file, e)
	}
}

// relayConfig parses the ConfigMap's relay.yaml with the project's own
// parser and the environment the Deployment gives the container.
func relayConfig(t *testing.T, m *manifests) *config.Config {
	t.Helper()
	c := m.dep.Spec.Template.Spec.Containers[0]
	env := map[string]string{}
	for _, e := range c.Env {
		switch {
		case e.ValueFrom != nil && e.ValueFrom.SecretKeyRef != nil:
			ref := e.ValueFrom.SecretKeyRef
			if ref.Name != m.secret.Name || m.secret.StringData[ref.Key] == "" {
				t.Errorf("env %s names secret %s key %s, which the Secret does not have", e.Name, ref.Name, ref.Key)
			}
			env[e.Name] = m.secret.StringData[ref.Key]
		case e.ValueFrom != nil:
			t.Errorf("env %s: only values and Secret keys are understood here", e.Name)
		default:
			env[e.Name] = e.Value
		}
	}
	cfg, err := config.Parse([]byte(m.cm.Data["relay.yaml"]), func(k string) (string, bool) { v, ok := env[k]; return v, ok })
	if err != nil {
		t.Fatalf("the ConfigMap's relay.yaml with the pod's env: %v", err)
	}
	return cfg
}

// adminPort is the port of the configuration's admin listener.
func adminPort(t *testing.T, cfg *config.Config) int {
	t.Helper()
	host, port, err := net.SplitHostPort(cfg.Admin.Listen)
	n, perr := strconv.Atoi(port)
	if err != nil || perr != nil {
		t.Fatalf("admin.listen %q: no port", cfg.Admin.Listen)
	}
	if host == "127.0.0.1" || host == "localhost" || host == "::1" {
		t.Errorf("admin.listen %q: probes and scrapes from outside the pod cannot reach localhost", cfg.Admin.Listen)
	}
	return n
}

// serves asks the relay's admin server (its real routes, with every
// readiness check passing) for path, and reports whether it answers 200.
func serves(path string) bool {
	rec := httptest.NewRecorder()
	admin.New("", nil, nil, nil).Handler().ServeHTTP(rec, httptest.NewRequest(http.MethodGet, path, nil))
	return rec.Code == http.StatusOK
}

// TestKubernetesManifests: the manifests are valid API objects and agree
// with each other and with the relay: the configuration they mount parses
// with the env they give, the probes ask the admin server for paths it
// serves on the port it listens on, the pod stops after the relay's shutdown
// timeout, and it runs locked down.
func TestKubernetesManifests(t *testing.T) {
	m := load(t)
	pod := m.dep.Spec.Template.Spec
	if len(pod.Containers) != 1 {
		t.Fatalf("%d containers, want 1", len(pod.Containers))
	}
	c := pod.Containers[0]

	cfg := relayConfig(t, m)
	if cfg.Databases["main"].DSN != m.secret.StringData["database-dsn"] {
		t.Errorf("the DSN the relay gets is %q, not the Secret's", cfg.Databases["main"].DSN)
	}
	var mount string
	for _, v := range c.VolumeMounts {
		for _, vol := range pod.Volumes {
			if vol.Name == v.Name && vol.ConfigMap != nil && vol.ConfigMap.Name == m.cm.Name {
				mount = v.MountPath
			}
		}
	}
	if want := []string{"run", "--config", filepath.Join(mount, "relay.yaml")}; !slices.Equal(c.Args, want) {
		t.Errorf("container args %q, want %q (the ConfigMap is mounted at %q)", c.Args, want, mount)
	}

	// Probes and ports meet the admin server.
	port := adminPort(t, cfg)
	if len(c.Ports) != 1 || c.Ports[0].Name != "admin" || c.Ports[0].ContainerPort != int32(port) {
		t.Errorf("container ports %+v, want admin on %d (admin.listen %q)", c.Ports, port, cfg.Admin.Listen)
	}
	for name, p := range map[string]*corev1.Probe{"readiness": c.ReadinessProbe, "liveness": c.LivenessProbe} {
		if p == nil || p.HTTPGet == nil {
			t.Errorf("%s probe %+v: want an HTTP GET", name, p)
			continue
		}
		if p.HTTPGet.Port.String() != "admin" && p.HTTPGet.Port.IntValue() != port {
			t.Errorf("%s probe on port %s, want the admin port", name, p.HTTPGet.Port.String())
		}
		if !serves(p.HTTPGet.Path) {
			t.Errorf("%s probe asks for %s, which the admin server does not serve", name, p.HTTPGet.Path)
		}
	}
	// Liveness must not depend on the databases (a database outage would
	// restart every pod): it is /healthz, readiness is /readyz.
	if p := c.LivenessProbe; p != nil && p.HTTPGet != nil && p.HTTPGet.Path != "/healthz" {
		t.Errorf("liveness probe on %s, want /healthz", p.HTTPGet.Path)
	}
	if p := c.ReadinessProbe; p != nil && p.HTTPGet != nil && p.HTTPGet.Path != "/readyz" {
		t.Errorf("readiness probe on %s, want /readyz", p.HTTPGet.Path)
	}
	if g := pod.TerminationGracePeriodSeconds; g == nil || time.Duration(*g)*time.Second <= cfg.Shutdown.Timeout.D() {
		t.Errorf("terminationGracePeriodSeconds %s, want above shutdown.timeout %s", fmtPtr(g), cfg.Shutdown.Timeout)
	}
	if c.Resources.Requests.Cpu().IsZero() || c.Resources.Requests.Memory().IsZero() || c.Resources.Limits.Memory().IsZero() {
		t.Errorf("resources %+v: want CPU and memory requests and a memory limit", c.Resources)
	}
	sc := c.SecurityContext
	if pod.SecurityContext == nil || pod.SecurityContext.RunAsNonRoot == nil || !*pod.SecurityContext.RunAsNonRoot ||
		sc == nil || sc.ReadOnlyRootFilesystem == nil || !*sc.ReadOnlyRootFilesystem ||
		sc.AllowPrivilegeEscalation == nil || *sc.AllowPrivilegeEscalation ||
		sc.Capabilities == nil || !slices.Equal(sc.Capabilities.Drop, []corev1.Capability{"ALL"}) || len(sc.Capabilities.Add) != 0 {
		t.Errorf("security context: want non-root, read-only root filesystem, no privilege escalation, all capabilities dropped")
	}
	if u := pod.SecurityContext.RunAsUser; u != nil && *u == 0 {
		t.Error("runAsUser 0")
	}
	if *m.dep.Spec.Replicas < 3 {
		t.Errorf("%d replicas: want three sharing the sources, so that losing one leaves a majority", *m.dep.Spec.Replicas)
	}
	if a := pod.Affinity; a == nil || a.PodAntiAffinity == nil || len(a.PodAntiAffinity.PreferredDuringSchedulingIgnoredDuringExecution) == 0 ||
		a.PodAntiAffinity.PreferredDuringSchedulingIgnoredDuringExecution[0].PodAffinityTerm.TopologyKey != "kubernetes.io/hostname" {
		t.Errorf("affinity %+v: want the replicas spread over nodes (preferred anti-affinity by hostname)", pod.Affinity)
	}

	// The Service and the budget select the Deployment's pods.
	labels := m.dep.Spec.Template.Labels
	for k, v := range m.dep.Spec.Selector.MatchLabels {
		if labels[k] != v {
			t.Errorf("the Deployment selects %s=%s, which its pods do not carry", k, v)
		}
	}
	for k, v := range m.svc.Spec.Selector {
		if labels[k] != v {
			t.Errorf("the Service selects %s=%s, which the pods do not carry", k, v)
		}
	}
	if len(m.svc.Spec.Ports) != 1 || m.svc.Spec.Ports[0].TargetPort.String() != "admin" {
		t.Errorf("service ports %+v, want the admin port", m.svc.Spec.Ports)
	}
	ann := m.svc.Annotations
	if ann["prometheus.io/scrape"] != "true" || ann["prometheus.io/port"] != strconv.Itoa(port) || !serves(ann["prometheus.io/path"]) ||
		ann["prometheus.io/path"] != "/metrics" {
		t.Errorf("scrape annotations %v, want scrape true, port %d, path /metrics", ann, port)
	}
	for k, v := range m.pdb.Spec.Selector.MatchLabels {
		if labels[k] != v {
			t.Errorf("the PodDisruptionBudget selects %s=%s, which the pods do not carry", k, v)
		}
	}
	if u := m.pdb.Spec.MaxUnavailable; m.pdb.Spec.MinAvailable != nil || u == nil || u.IntValue() != 1 {
		t.Errorf("budget minAvailable %v maxUnavailable %v: want a drain to take one replica at a time, whatever the scale",
			m.pdb.Spec.MinAvailable, m.pdb.Spec.MaxUnavailable)
	}
}

func fmtPtr[T any](p *T) string {
	if p == nil {
		return "unset"
	}
	return fmt.Sprint(*p)
}

// instruction is one Dockerfile instruction, continuation lines joined.
type instruction struct{ op, args string }

func parseDockerfile(t *testing.T, path string) [][]instruction {
	t.Helper()
	data, err := os.ReadFile(path)
	if err != nil {
		t.Fatal(err)
	}
	var stages [][]instruction
	var cur string
	for line := range strings.Lines(string(data)) {
		line = strings.TrimSpace(line)
		if strings.HasPrefix(line, "#") || (line == "" && cur == "") {
			continue
		}
		if s, ok := strings.CutSuffix(line, "\\"); ok {
			cur += s + " "
			continue
		}
		cur += line
		op, args, _ := strings.Cut(cur, " ")
		cur = ""
		op = strings.ToUpper(op)
		if op == "FROM" {
			stages = append(stages, nil)
		}
		if len(stages) == 0 {
			if op == "ARG" {
				continue
			}
			t.Fatalf("%s before FROM", op)
		}
		stages[len(stages)-1] = append(stages[len(stages)-1], instruction{op, strings.TrimSpace(args)})
	}
	return stages
}

func find(stage []instruction, op string) []string {
	var out []string
	for _, in := range stage {
		if in.op == op {
			out = append(out, in.args)
		}
	}
	return out
}

// execForm decodes a JSON-array instruction argument.
func execForm(t *testing.T, s string) []string {
	t.Helper()
	var out []string
	if err := yaml.Unmarshal([]byte(s), &out); err != nil || !strings.HasPrefix(s, "[") {
		t.Fatalf("%q: want the exec (JSON array) form", s)
	}
	return out
}

// TestDockerfile: the image's binary is CI's (the build stage runs `make
// build`, the static, stamped build), it is copied into a distroless or
// scratch image that runs it as a non-root user on the admin port, and it
// starts the relay with the configuration where the manifests mount it.
func TestDockerfile(t *testing.T) {
	stages := parseDockerfile(t, "Dockerfile")
	if len(stages) < 2 {
		t.Fatalf("%d stages, want a build stage and a runtime stage", len(stages))
	}
	final := stages[len(stages)-1]
	base := strings.Fields(final[0].args)[0]
	if base != "scratch" && !strings.HasPrefix(base, "gcr.io/distroless/static") {
		t.Errorf("runtime base %s, want gcr.io/distroless/static or scratch (a static binary needs nothing else)", base)
	}
	if runs := find(final, "RUN"); len(runs) > 0 {
		t.Errorf("the runtime stage runs %q: it has no shell", runs)
	}

	// The build stage runs `make build`, whose output the runtime copies.
	copies := find(final, "COPY")
	if len(copies) != 1 || !strings.HasPrefix(copies[0], "--from=") {
		t.Fatalf("runtime COPY %q, want one copy of the binary from the build stage", copies)
	}
	f := strings.Fields(strings.TrimPrefix(copies[0], "--from="))
	from, src, dst := f[0], f[1], f[len(f)-1]
	var build []instruction
	for _, s := range stages[:len(stages)-1] {
		if fs := strings.Fields(s[0].args); len(fs) == 3 && strings.EqualFold(fs[1], "AS") && fs[2] == from {
			build = s
		}
	}
	if build == nil {
		t.Fatalf("the runtime copies from %q, which is no stage", from)
	}
	var makeBuild string
	for _, r := range find(build, "RUN") {
		if strings.HasPrefix(r, "make build") {
			makeBuild = r
		}
	}
	if makeBuild == "" {
		t.Fatal("the build stage does not run `make build`, which builds CI's binary")
	}
	bin := "bin/outbox-relay"
	for _, w := range strings.Fields(makeBuild) {
		if v, ok := strings.CutPrefix(w, "BIN="); ok {
			bin = v
		}
	}
	if workdir := find(build, "WORKDIR"); !filepath.IsAbs(bin) && len(workdir) > 0 {
		bin = filepath.Join(workdir[len(workdir)-1], bin)
	}
	if src != bin {
		t.Errorf("the runtime copies %s, but make build writes %s", src, bin)
	}
	// What make build runs: the static, stamped build.
	out, err := exec.Command("make", "-s", "-n", "-C", "..", "build", "BIN="+bin, "VERSION=v9.9.9").CombinedOutput()
	if err != nil {
		t.Fatalf("make -n build: %v\n%s", err, out)
	}
	for _, want := range []string{"CGO_ENABLED=0", "-trimpath", "internal/buildinfo.version=v9.9.9", "-o " + bin} {
		if !bytes.Contains(out, []byte(want)) {
			t.Errorf("make build runs %s, without %q", out, want)
		}
	}
	// The build context keeps what make build reads.
	ignore, err := os.ReadFile("Dockerfile.dockerignore")
	if err != nil {
		t.Fatal(err)
	}
	for line := range strings.Lines(string(ignore)) {
		pat := strings.TrimSpace(line)
		if pat == "" || strings.HasPrefix(pat, "#") {
			continue
		}
		for _, need := range []string{"go.mod", "go.sum", "Makefile", "cmd", "internal", "migrations"} {
			if ok, _ := filepath.Match(strings.TrimSuffix(pat, "/"), need); ok {
				t.Errorf("Dockerfile.dockerignore's %q leaves %s out of the build context", pat, need)
			}
		}
	}
	ci, err := os.ReadFile("../.ci/run")
	if err != nil || !regexp.MustCompile(`(?m)^make build\b`).Match(ci) {
		t.Errorf(".ci/run does not run `make build` (%v): CI and the image would build different binaries", err)
	}

	user := find(final, "USER")
	if len(user) == 0 {
		t.Fatal("the runtime stage sets no USER: it would run as root")
	}
	uid, _, _ := strings.Cut(user[len(user)-1], ":")
	if n, err := strconv.Atoi(uid); uid == "root" || (err == nil && n == 0) || (err != nil && !strings.HasSuffix(base, ":nonroot")) {
		t.Errorf("USER %s: want a non-root numeric uid (Kubernetes' runAsNonRoot checks the image's user by number)", uid)
	}

	m := load(t)
	cfg := relayConfig(t, m)
	if e := find(final, "EXPOSE"); len(e) != 1 || e[0] != strconv.Itoa(adminPort(t, cfg)) {
		t.Errorf("EXPOSE %q, want the admin port %d", e, adminPort(t, cfg))
	}
	entry, cmd := find(final, "ENTRYPOINT"), find(final, "CMD")
	if len(entry) != 1 || len(cmd) != 1 {
		t.Fatalf("ENTRYPOINT %q CMD %q: want one of each", entry, cmd)
	}
	if e := execForm(t, entry[0]); !slices.Equal(e, []string{dst}) {
		t.Errorf("ENTRYPOINT %q, want [%q] (the binary copied in)", e, dst)
	}
	if c, args := execForm(t, cmd[0]), m.dep.Spec.Template.Spec.Containers[0].Args; !slices.Equal(c, args) {
		t.Errorf("CMD %q, want the manifests' arguments %q", c, args)
	}
}

// TestSystemdUnit: the unit is hardened, reads its secrets from an
// environment file, restarts on failure, starts the relay with the same
// configuration path as the image, and stops after the relay's own shutdown
// timeout. systemd-analyze verify checks it too, where it is installed.
func TestSystemdUnit(t *testing.T) {
	const unit = "systemd/outbox-relay.service"
	data, err := os.ReadFile(unit)
	if err != nil {
		t.Fatal(err)
	}
	keys := map[string]string{}
	section := ""
	sc := bufio.NewScanner(bytes.NewReader(data))
	for sc.Scan() {
		line := strings.TrimSpace(sc.Text())
		switch {
		case line == "" || strings.HasPrefix(line, "#") || strings.HasPrefix(line, ";"):
		case strings.HasPrefix(line, "["):
			section = strings.Trim(line, "[]")
		default:
			k, v, ok := strings.Cut(line, "=")
			if !ok {
				t.Fatalf("%s: %q", unit, line)
			}
			keys[section+"."+strings.TrimSpace(k)] = strings.TrimSpace(v)
		}
	}
	for k, want := range map[string]string{"Service.NoNewPrivileges": "yes", "Service.ProtectSystem": "strict",
		"Service.DynamicUser": "yes", "Service.Restart": "on-failure", "Service.PrivateTmp": "yes",
		"Service.ProtectHome": "yes", "Service.CapabilityBoundingSet": "", "Install.WantedBy": "multi-user.target"} {
		if v, ok := keys[k]; !ok || v != want {
			t.Errorf("%s=%q, want %q", k, v, want)
		}
	}
	if ef := strings.TrimPrefix(keys["Service.EnvironmentFile"], "-"); !filepath.IsAbs(ef) {
		t.Errorf("EnvironmentFile=%q: want the secrets' file (OUTBOX_RELAY_DATABASE_MAIN_DSN=...)", keys["Service.EnvironmentFile"])
	}
	// The same command as the image's entrypoint.
	stages := parseDockerfile(t, "Dockerfile")
	final := stages[len(stages)-1]
	want := append(execForm(t, find(final, "ENTRYPOINT")[0]), execForm(t, find(final, "CMD")[0])...)
	if got := strings.Fields(keys["Service.ExecStart"]); !slices.Equal(got, want) {
		t.Errorf("ExecStart=%q, want %q (the image's)", keys["Service.ExecStart"], strings.Join(want, " "))
	}
	stop, err := parseSystemdTime(keys["Service.TimeoutStopSec"])
	if err != nil || stop <= config.DefaultShutdownTimeout {
		t.Errorf("TimeoutStopSec=%q (%v), want above the default shutdown.timeout %s", keys["Service.TimeoutStopSec"], err, config.DefaultShutdownTimeout)
	}

	analyze, err := exec.LookPath("systemd-analyze")
	if err != nil {
		t.Log("systemd-analyze not installed: the unit is not verified by systemd")
		return
	}
	// verify insists that ExecStart's binary exists: point it at one that
	// does (this test's), and keep the unit's name.
	self, err := os.Executable()
	if err != nil {
		t.Fatal(err)
	}
	copyPath := filepath.Join(t.TempDir(), "outbox-relay.service")
	if err := os.WriteFile(copyPath, bytes.ReplaceAll(data, []byte(want[0]), []byte(self)), 0o644); err != nil {
		t.Fatal(err)
	}
	out, err := exec.Command(analyze, "verify", copyPath).CombinedOutput()
	if err != nil || len(bytes.TrimSpace(out)) > 0 {
		t.Errorf("systemd-analyze verify: %v\n%s", err, out)
	}
}

// parseSystemdTime reads a systemd time span such as "45s", "1min 30s" or
// "45" (seconds).
func parseSystemdTime(s string) (time.Duration, error) {
	if n, err := strconv.Atoi(s); err == nil {
		return time.Duration(n) * time.Second, nil
	}
	s = strings.NewReplacer("min", "m", " ", "").Replace(s)
	return time.ParseDuration(s)
}

// TestAlertRules runs the rules' unit tests with promtool: each alert fires
// on the series it is meant for, and not before. Every alert must have a
// test where it fires and one where it does not.
func TestAlertRules(t *testing.T) {
	var rules struct {
		Groups []struct {
			Rules []struct{ Alert string }
		}
	}
	var tests struct {
		Tests []struct {
			AlertRuleTest []struct {
				Alertname string
				ExpAlerts []any `json:"exp_alerts"`
			} `json:"alert_rule_test"`
		}
	}
	for file, into := range map[string]any{"prometheus/alerts.yaml": &rules, "prometheus/alerts_test.yaml": &tests} {
		data, err := os.ReadFile(file)
		if err != nil {
			t.Fatal(err)
		}
		if err := yaml.Unmarshal(data, into); err != nil {
			t.Fatalf("%s: %v", file, err)
		}
	}
	fires, quiet := map[string]bool{}, map[string]bool{}
	for _, tc := range tests.Tests {
		for _, a := range tc.AlertRuleTest {
			if len(a.ExpAlerts) > 0 {
				fires[a.Alertname] = true
			} else {
				quiet[a.Alertname] = true
			}
		}
	}
	n := 0
	for _, g := range rules.Groups {
		for _, r := range g.Rules {
			n++
			if !fires[r.Alert] || !quiet[r.Alert] {
				t.Errorf("alert %s: alerts_test.yaml has no test where it fires (%v) or none where it stays quiet (%v)",
					r.Alert, fires[r.Alert], quiet[r.Alert])
			}
		}
	}
	if n == 0 {
		t.Fatal("no alert rules")
	}

	promtool, err := exec.LookPath("promtool")
	if err != nil {
		if os.Getenv("OUTBOX_RELAY_CI") != "" {
			t.Fatal("promtool not found (Debian package prometheus); .ci/run installs it")
		}
		t.Skip("promtool not found: install Debian's prometheus package (apt-get install prometheus) to run the alert rules' tests")
	}
	for _, args := range [][]string{{"check", "rules", "prometheus/alerts.yaml"}, {"test", "rules", "prometheus/alerts_test.yaml"}} {
		if out, err := exec.Command(promtool, args...).CombinedOutput(); err != nil {
			t.Errorf("promtool %s: %v\n%s", strings.Join(args, " "), err, out)
		} else {
			t.Logf("promtool %s: %s", strings.Join(args, " "), strings.Join(strings.Fields(string(out)), " "))
		}
	}
}
