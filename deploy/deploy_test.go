// Package deploy holds the deployment kit (Dockerfile, Kubernetes
// manifests, Prometheus alerts, Grafana dashboard, systemd unit); its tests
// check each piece against the relay it deploys.
package deploy

import (
	"bufio"
	"bytes"
	"net"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"
	"time"

	appsv1 "k8s.io/api/apps/v1"
	corev1 "k8s.io/api/core/v1"
	policyv1 "k8s.io/api/policy/v1"
	"sigs.k8s.io/yaml"

	"github.com/outbox-relay/outbox-relay/internal/config"
)

// decodeStrict decodes a manifest into a Kubernetes API type, refusing
// fields the type does not have (a misspelt or misplaced field).
func decodeStrict(t *testing.T, file string, into any) {
	t.Helper()
	data, err := os.ReadFile(filepath.Join("kubernetes", file))
	if err != nil {
		t.Fatal(err)
	}
	if err := yaml.UnmarshalStrict(data, into); err != nil {
		t.Fatalf("%s: %v", file, err)
	}
}

type manifests struct {
	cm     corev1.ConfigMap
	secret corev1.Secret
	dep    appsv1.Deployment
	svc    corev1.Service
	pdb    policyv1.PodDisruptionBudget
}

func load(t *testing.T) *manifests {
	m := &manifests{}
	decodeStrict(t, "configmap.yaml", &m.cm)
	decodeStrict(t, "secret.yaml", &m.secret)
	decodeStrict(t, "deployment.yaml", &m.dep)
	decodeStrict(t, "service.yaml", &m.svc)
	decodeStrict(t, "pdb.yaml", &m.pdb)
	for name, kind := range map[string]string{"ConfigMap": m.cm.Kind, "Secret": m.secret.Kind, "Deployment": m.dep.Kind,
		"Service": m.svc.Kind, "PodDisruptionBudget": m.pdb.Kind} {
		if kind != name {
			t.Errorf("manifest of kind %q where %s was expected", kind, name)
		}
	}
	return m
}

// TestKubernetesManifests: the manifests are valid API objects and agree
// with each other and with the relay: the configuration they mount parses
// with the env they give, the probes name the admin server's paths on its
// port, the pod stops after the relay's shutdown timeout, and it runs
// locked down.
func TestKubernetesManifests(t *testing.T) {
	m := load(t)
	pod := m.dep.Spec.Template.Spec
	if len(pod.Containers) != 1 {
		t.Fatalf("%d containers, want 1", len(pod.Containers))
	}
	c := pod.Containers[0]

	// The configuration, as the pod sees it.
	env := map[string]string{}
	for _, e := range c.Env {
		switch {
		case e.ValueFrom != nil && e.ValueFrom.SecretKeyRef != nil:
			ref := e.ValueFrom.SecretKeyRef
			if ref.Name != m.secret.Name || m.secret.StringData[ref.Key] == "" {
				t.Errorf("env %s names secret %s key %s, which the Secret does not have", e.Name, ref.Name, ref.Key)
			}
			env[e.Name] = m.secret.StringData[ref.Key]
		default:
			env[e.Name] = e.Value
		}
	}
	cfg, err := config.Parse([]byte(m.cm.Data["relay.yaml"]), func(k string) (string, bool) { v, ok := env[k]; return v, ok })
	if err != nil {
		t.Fatalf("the ConfigMap's relay.yaml with the pod's env: %v", err)
	}
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
	if want := []string{"run", "--config", filepath.Join(mount, "relay.yaml")}; strings.Join(c.Args, " ") != strings.Join(want, " ") {
		t.Errorf("container args %q, want %q (the ConfigMap is mounted at %q)", c.Args, want, mount)
	}

	// Probes and ports meet the admin server.
	_, port, err := net.SplitHostPort(cfg.Admin.Listen)
	if err != nil || port == "" {
		t.Fatalf("admin.listen %q", cfg.Admin.Listen)
	}
	if h, _, _ := net.SplitHostPort(cfg.Admin.Listen); h == "127.0.0.1" || h == "localhost" {
		t.Errorf("admin.listen %q: probes from the kubelet cannot reach localhost", cfg.Admin.Listen)
	}
	if len(c.Ports) != 1 || c.Ports[0].Name != "admin" || c.Ports[0].ContainerPort != int32(atoi(t, port)) {
		t.Errorf("container ports %+v, want admin on %s", c.Ports, port)
	}
	if p := c.ReadinessProbe; p == nil || p.HTTPGet == nil || p.HTTPGet.Path != "/readyz" || p.HTTPGet.Port.String() != "admin" {
		t.Errorf("readiness probe %+v, want GET /readyz on admin", p)
	}
	if p := c.LivenessProbe; p == nil || p.HTTPGet == nil || p.HTTPGet.Path != "/healthz" || p.HTTPGet.Port.String() != "admin" {
		t.Errorf("liveness probe %+v, want GET /healthz on admin", p)
	}
	if g := pod.TerminationGracePeriodSeconds; g == nil || time.Duration(*g)*time.Second <= cfg.Shutdown.Timeout.D() {
		t.Errorf("terminationGracePeriodSeconds %v, want above shutdown.timeout %s", g, cfg.Shutdown.Timeout)
	}
	if c.Resources.Requests.Cpu().IsZero() || c.Resources.Limits.Memory().IsZero() {
		t.Errorf("resources %+v: want a CPU request and a memory limit", c.Resources)
	}
	sc := c.SecurityContext
	if pod.SecurityContext == nil || pod.SecurityContext.RunAsNonRoot == nil || !*pod.SecurityContext.RunAsNonRoot ||
		sc == nil || sc.ReadOnlyRootFilesystem == nil || !*sc.ReadOnlyRootFilesystem ||
		sc.AllowPrivilegeEscalation == nil || *sc.AllowPrivilegeEscalation ||
		sc.Capabilities == nil || len(sc.Capabilities.Drop) != 1 || sc.Capabilities.Drop[0] != "ALL" {
		t.Errorf("security context: want non-root, read-only root filesystem, no privilege escalation, all capabilities dropped")
	}

	// The Service and the budget select the Deployment's pods.
	labels := m.dep.Spec.Template.Labels
	for k, v := range m.svc.Spec.Selector {
		if labels[k] != v {
			t.Errorf("the Service selects %s=%s, which the pods do not carry", k, v)
		}
	}
	if len(m.svc.Spec.Ports) != 1 || m.svc.Spec.Ports[0].TargetPort.String() != "admin" {
		t.Errorf("service ports %+v, want the admin port", m.svc.Spec.Ports)
	}
	if m.svc.Annotations["prometheus.io/port"] != port || m.svc.Annotations["prometheus.io/path"] != "/metrics" {
		t.Errorf("scrape annotations %v, want port %s path /metrics", m.svc.Annotations, port)
	}
	for k, v := range m.pdb.Spec.Selector.MatchLabels {
		if labels[k] != v {
			t.Errorf("the PodDisruptionBudget selects %s=%s, which the pods do not carry", k, v)
		}
	}
	if m.pdb.Spec.MinAvailable == nil || m.pdb.Spec.MinAvailable.IntValue() >= int(*m.dep.Spec.Replicas) {
		t.Errorf("minAvailable %v with %d replicas: a drain could never proceed", m.pdb.Spec.MinAvailable, *m.dep.Spec.Replicas)
	}
}

func atoi(t *testing.T, s string) int {
	n := 0
	for _, r := range s {
		if r < '0' || r > '9' {
			t.Fatalf("not a port: %q", s)
		}
		n = n*10 + int(r-'0')
	}
	return n
}

// TestDockerfile: the image is built with the same command as CI's binary,
// runs as a non-root user, and starts the relay with the configuration
// where the manifests mount it.
func TestDockerfile(t *testing.T) {
	data, err := os.ReadFile("Dockerfile")
	if err != nil {
		t.Fatal(err)
	}
	var stages [][]string // instructions per stage
	for line := range strings.Lines(string(data)) {
		line = strings.TrimSpace(line)
		if line == "" || strings.HasPrefix(line, "#") {
			continue
		}
		if strings.HasPrefix(line, "FROM ") {
			stages = append(stages, nil)
		}
		if len(stages) == 0 {
			t.Fatalf("an instruction before FROM: %q", line)
		}
		stages[len(stages)-1] = append(stages[len(stages)-1], line)
	}
	if len(stages) < 2 {
		t.Fatalf("%d stages, want a build stage and a runtime stage", len(stages))
	}
	has := func(stage []string, prefix string) string {
		for _, in := range stage {
			if strings.HasPrefix(in, prefix) {
				return in
			}
		}
		return ""
	}
	if in := has(stages[0], "RUN make build"); in == "" {
		t.Error("the build stage does not run `make build`, which builds CI's binary")
	}
	final := stages[len(stages)-1]
	user := strings.TrimPrefix(has(final, "USER "), "USER ")
	if user == "" || user == "root" || strings.HasPrefix(user, "0") {
		t.Errorf("the image runs as %q, want a non-root user", user)
	}
	if has(final, "COPY --from=") == "" {
		t.Error("the runtime stage copies nothing from the build stage")
	}
	m := load(t)
	cmd := has(final, "CMD ")
	want := `CMD ["` + strings.Join(m.dep.Spec.Template.Spec.Containers[0].Args, `", "`) + `"]`
	if cmd != want {
		t.Errorf("%s, want %s (the manifests' arguments)", cmd, want)
	}
}

// TestSystemdUnit: the unit is hardened and stops after the relay's own
// shutdown timeout.
func TestSystemdUnit(t *testing.T) {
	f, err := os.Open("systemd/outbox-relay.service")
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	keys := map[string]string{}
	sc := bufio.NewScanner(f)
	for sc.Scan() {
		line := strings.TrimSpace(sc.Text())
		if k, v, ok := strings.Cut(line, "="); ok && !strings.HasPrefix(line, "#") {
			keys[k] = v
		}
	}
	for k, want := range map[string]string{"NoNewPrivileges": "yes", "ProtectSystem": "strict", "DynamicUser": "yes",
		"Restart": "on-failure", "PrivateTmp": "yes"} {
		if keys[k] != want {
			t.Errorf("%s=%q, want %q", k, keys[k], want)
		}
	}
	if !strings.Contains(keys["ExecStart"], "outbox-relay run --config /etc/outbox-relay/relay.yaml") {
		t.Errorf("ExecStart=%q", keys["ExecStart"])
	}
	stop, err := time.ParseDuration(keys["TimeoutStopSec"])
	if err != nil || stop <= config.DefaultShutdownTimeout {
		t.Errorf("TimeoutStopSec=%q, want above the default shutdown.timeout %s", keys["TimeoutStopSec"], config.DefaultShutdownTimeout)
	}
	if path, err := exec.LookPath("systemd-analyze"); err == nil {
		if out, err := exec.Command(path, "verify", "systemd/outbox-relay.service").CombinedOutput(); err != nil &&
			!bytes.Contains(out, []byte("outbox-relay: command not found")) && !bytes.Contains(out, []byte("/usr/local/bin/outbox-relay")) {
			t.Errorf("systemd-analyze verify: %v\n%s", err, out)
		}
	}
}

// TestAlertRules runs the rules' unit tests with promtool: each alert fires
// on the series it is meant for, and not before.
func TestAlertRules(t *testing.T) {
	promtool, err := exec.LookPath("promtool")
	if err != nil {
		if os.Getenv("OUTBOX_RELAY_CI") != "" {
			t.Fatal("promtool not found (Debian package prometheus); .ci/run installs it")
		}
		t.Skip("promtool not found: install Debian's prometheus package to run the alert rules' tests")
	}
	for _, args := range [][]string{{"check", "rules", "prometheus/alerts.yaml"}, {"test", "rules", "prometheus/alerts_test.yaml"}} {
		if out, err := exec.Command(promtool, args...).CombinedOutput(); err != nil {
			t.Errorf("promtool %s: %v\n%s", strings.Join(args, " "), err, out)
		}
	}
}
