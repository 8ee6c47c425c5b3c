package kafka

import (
	"bytes"
	"crypto/ecdsa"
	"crypto/elliptic"
	"crypto/rand"
	"crypto/tls"
	"crypto/x509"
	"crypto/x509/pkix"
	"encoding/pem"
	"log/slog"
	"math/big"
	"net"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/twmb/franz-go/pkg/kfake"
	"github.com/twmb/franz-go/pkg/kgo"

	"github.com/outbox-relay/outbox-relay/internal/config"
	"github.com/outbox-relay/outbox-relay/internal/sink"
)

func TestSettingsErrors(t *testing.T) {
	t.Parallel()
	good := config.Sink{Type: "kafka", Brokers: []string{"localhost:9092"}}
	for name, mod := range map[string]func(*config.Sink){
		"type":        func(c *config.Sink) { c.Type = "nats" },
		"brokers":     func(c *config.Sink) { c.Brokers = nil },
		"compression": func(c *config.Sink) { c.Compression = "brotli" },
		"sasl":        func(c *config.Sink) { c.SASL = &config.SASL{Mechanism: "GSSAPI"} },
		"ca file":     func(c *config.Sink) { c.TLS = &config.TLS{Enabled: true, CAFile: "/nonexistent"} },
		"key file":    func(c *config.Sink) { c.TLS = &config.TLS{Enabled: true, CertFile: "c.pem"} },
	} {
		cfg := good
		mod(&cfg)
		if _, err := New(cfg); err == nil {
			t.Errorf("%s: no error", name)
		}
	}
	for _, codec := range []string{"", "none", "gzip", "snappy", "lz4", "ZSTD"} {
		cfg := good
		cfg.Compression = codec
		p, err := New(cfg)
		if err != nil {
			t.Fatalf("compression %q: %v", codec, err)
		}
		_ = p.Close(t.Context())
	}
}

func TestSettingsZeroValues(t *testing.T) {
	t.Parallel()
	p, err := New(config.Sink{Brokers: []string{"localhost:9092"}})
	if err != nil {
		t.Fatal(err)
	}
	defer p.Close(t.Context())
	if p.MaxMessageBytes() != defaultMaxMessageBytes {
		t.Errorf("MaxMessageBytes %d", p.MaxMessageBytes())
	}
	if got := p.client.OptValue(kgo.ClientID); got != defaultClientID {
		t.Errorf("client id %v", got)
	}
	if got := p.client.OptValue(kgo.RecordRetries); got != int64(defaultRecordRetries) {
		t.Errorf("record retries %v", got)
	}
	if got := p.client.OptValue(kgo.RecordDeliveryTimeout); got != defaultDeliveryTimeout {
		t.Errorf("delivery timeout %v", got)
	}
	if got := p.client.OptValue(kgo.ProducerBatchMaxBytes); got != int32(defaultMaxMessageBytes) {
		t.Errorf("batch max bytes %v", got)
	}
}

func TestSASL(t *testing.T) {
	t.Parallel()
	c := newCluster(t, kfake.EnableSASL(),
		kfake.Superuser("PLAIN", "plain", "secret"),
		kfake.Superuser("SCRAM-SHA-256", "scram256", "secret"),
		kfake.Superuser("SCRAM-SHA-512", "scram512", "secret"),
	)
	for _, tc := range []struct{ mech, user string }{
		{"PLAIN", "plain"}, {"scram-sha-256", "scram256"}, {"SCRAM-SHA-512", "scram512"},
	} {
		cfg := testConfig(c)
		cfg.SASL = &config.SASL{Mechanism: tc.mech, Username: tc.user, Password: "secret"}
		p := newPublisher(t, cfg)
		if err := p.Publish(testCtx(t), []*sink.Message{msg(tc.user, "", []byte("x"))})[0]; err != nil {
			t.Errorf("%s: %v", tc.mech, err)
		}
	}
	cfg := testConfig(c)
	cfg.SASL = &config.SASL{Mechanism: "PLAIN", Username: "plain", Password: "wrong"}
	if err := newPublisher(t, cfg).Ping(testCtx(t)); err == nil {
		t.Error("wrong password: ping succeeded")
	}
}

func TestMutualTLS(t *testing.T) {
	t.Parallel()
	dir := t.TempDir()
	ca, caKey := newCert(t, nil, nil, "test ca")
	server, serverKey := newCert(t, ca, caKey, "broker")
	client, clientKey := newCert(t, ca, caKey, "relay")
	caFile := writePEM(t, dir, "ca.pem", ca.Raw, nil)
	certFile := writePEM(t, dir, "client.pem", client.Raw, nil)
	keyFile := writePEM(t, dir, "client-key.pem", nil, clientKey)

	pool := x509.NewCertPool()
	pool.AddCert(ca)
	c := newCluster(t, kfake.TLS(&tls.Config{
		Certificates: []tls.Certificate{{Certificate: [][]byte{server.Raw}, PrivateKey: serverKey}},
		ClientCAs:    pool,
		ClientAuth:   tls.RequireAndVerifyClientCert,
		MinVersion:   tls.VersionTLS12,
	}))

	cfg := testConfig(c)
	cfg.TLS = &config.TLS{Enabled: true, CAFile: caFile, CertFile: certFile, KeyFile: keyFile}
	p := newPublisher(t, cfg)
	if err := p.Publish(testCtx(t), []*sink.Message{msg("a", "", []byte("x"))})[0]; err != nil {
		t.Fatal(err)
	}

	cfg.TLS = &config.TLS{Enabled: true, CAFile: caFile} // no client certificate
	if err := newPublisher(t, cfg).Ping(testCtx(t)); err == nil {
		t.Error("ping without a client certificate succeeded")
	}
}

func TestLoggerAndMetrics(t *testing.T) {
	t.Parallel()
	c := newCluster(t)
	var logs syncBuffer
	logger := slog.New(slog.NewTextHandler(&logs, &slog.HandlerOptions{Level: slog.LevelDebug}))
	reg := prometheus.NewRegistry()
	p := newPublisher(t, testConfig(c), WithLogger(logger), WithRegisterer(reg))

	if got := (slogLogger{logger}).Level(); got != kgo.LogLevelDebug {
		t.Errorf("log level %v, want debug", got)
	}
	if err := p.Publish(testCtx(t), []*sink.Message{msg("a", "", []byte("x"))})[0]; err != nil {
		t.Fatal(err)
	}
	families, err := reg.Gather()
	if err != nil {
		t.Fatal(err)
	}
	var names []string
	for _, f := range families {
		names = append(names, f.GetName())
	}
	if !strings.Contains(strings.Join(names, " "), "outbox_relay_kafka_write_bytes_total") {
		t.Errorf("no client metrics among %v", names)
	}
	_ = p.Close(testCtx(t))
	if !strings.Contains(logs.String(), "level=DEBUG") {
		t.Errorf("no client logs: %q", logs.String())
	}
}

type syncBuffer struct {
	mu sync.Mutex
	b  bytes.Buffer
}

func (s *syncBuffer) Write(p []byte) (int, error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.b.Write(p)
}

func (s *syncBuffer) String() string {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.b.String()
}

// newCert makes a certificate for 127.0.0.1 signed by parent, or a CA when
// parent is nil.
func newCert(t *testing.T, parent *x509.Certificate, parentKey *ecdsa.PrivateKey, name string) (*x509.Certificate, *ecdsa.PrivateKey) {
	t.Helper()
	key, err := ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
	if err != nil {
		t.Fatal(err)
	}
	tmpl := &x509.Certificate{
		SerialNumber: big.NewInt(time.Now().UnixNano()),
		Subject:      pkix.Name{CommonName: name},
		NotBefore:    time.Now().Add(-time.Hour),
		NotAfter:     time.Now().Add(time.Hour),
		IPAddresses:  []net.IP{net.IPv4(127, 0, 0, 1)},
		ExtKeyUsage:  []x509.ExtKeyUsage{x509.ExtKeyUsageServerAuth, x509.ExtKeyUsageClientAuth},
		KeyUsage:     x509.KeyUsageDigitalSignature,
	}
	if parent == nil {
		tmpl.IsCA, tmpl.BasicConstraintsValid = true, true
		tmpl.KeyUsage |= x509.KeyUsageCertSign
		parent, parentKey = tmpl, key
	}
	der, err := x509.CreateCertificate(rand.Reader, tmpl, parent, &key.PublicKey, parentKey)
	if err != nil {
		t.Fatal(err)
	}
	cert, err := x509.ParseCertificate(der)
	if err != nil {
		t.Fatal(err)
	}
	return cert, key
}

func writePEM(t *testing.T, dir, name string, certDER []byte, key *ecdsa.PrivateKey) string {
	t.Helper()
	block := &pem.Block{Type: "CERTIFICATE", Bytes: certDER}
	if key != nil {
		der, err := x509.MarshalECPrivateKey(key)
		if err != nil {
			t.Fatal(err)
		}
		block = &pem.Block{Type: "EC PRIVATE KEY", Bytes: der}
	}
	path := filepath.Join(dir, name)
	if err := os.WriteFile(path, pem.EncodeToMemory(block), 0o600); err != nil {
		t.Fatal(err)
	}
	return path
}
