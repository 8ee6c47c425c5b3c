package sinkconf

import (
	"crypto/ecdsa"
	"crypto/elliptic"
	"crypto/rand"
	"crypto/x509"
	"crypto/x509/pkix"
	"encoding/pem"
	"math/big"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"gopkg.in/yaml.v3"
)

func TestDurationYAML(t *testing.T) {
	var v struct {
		D Duration `yaml:"d"`
	}
	if err := yaml.Unmarshal([]byte("d: 1m30s"), &v); err != nil || v.D.D() != 90*time.Second {
		t.Fatalf("1m30s: %v %v", v.D, err)
	}
	for _, bad := range []string{"d: 5", "d: soon", "d: [1s]"} {
		err := yaml.Unmarshal([]byte(bad), &v)
		if _, ok := err.(*yaml.TypeError); !ok || !strings.Contains(err.Error(), "line 1") {
			t.Errorf("%q: got %v, want a *yaml.TypeError with the line", bad, err)
		}
	}
	out, err := yaml.Marshal(struct {
		D Duration `yaml:"d"`
	}{Duration(250 * time.Millisecond)})
	if err != nil || strings.TrimSpace(string(out)) != "d: 250ms" {
		t.Fatalf("marshal: %q %v", out, err)
	}
}

func TestTLSProblems(t *testing.T) {
	if ps := (TLS{CertFile: "c"}).Problems("tls"); len(ps) != 1 || ps[0].Field != "tls.key_file" {
		t.Errorf("cert without key: %v", ps)
	}
	if ps := (TLS{KeyFile: "k"}).Problems("tls"); len(ps) != 1 || ps[0].Field != "tls.cert_file" {
		t.Errorf("key without cert: %v", ps)
	}
	if ps := (TLS{CertFile: "c", KeyFile: "k"}).Problems("tls"); len(ps) != 0 {
		t.Errorf("pair: %v", ps)
	}
	if !(TLS{}).IsZero() || (TLS{InsecureSkipVerify: true}).IsZero() {
		t.Error("IsZero")
	}
}

// writeCert writes a self-signed certificate and its key as PEM files.
func writeCert(t *testing.T) (certFile, keyFile string) {
	t.Helper()
	key, err := ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
	if err != nil {
		t.Fatal(err)
	}
	tmpl := &x509.Certificate{
		SerialNumber: big.NewInt(1), Subject: pkix.Name{CommonName: "test"},
		NotBefore: time.Now().Add(-time.Hour), NotAfter: time.Now().Add(time.Hour),
		IsCA: true, BasicConstraintsValid: true, KeyUsage: x509.KeyUsageCertSign | x509.KeyUsageDigitalSignature,
	}
	der, err := x509.CreateCertificate(rand.Reader, tmpl, tmpl, &key.PublicKey, key)
	if err != nil {
		t.Fatal(err)
	}
	kder, err := x509.MarshalECPrivateKey(key)
	if err != nil {
		t.Fatal(err)
	}
	dir := t.TempDir()
	certFile, keyFile = filepath.Join(dir, "cert.pem"), filepath.Join(dir, "key.pem")
	if err := os.WriteFile(certFile, pem.EncodeToMemory(&pem.Block{Type: "CERTIFICATE", Bytes: der}), 0o600); err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(keyFile, pem.EncodeToMemory(&pem.Block{Type: "EC PRIVATE KEY", Bytes: kder}), 0o600); err != nil {
		t.Fatal(err)
	}
	return certFile, keyFile
}

func TestTLSConfig(t *testing.T) {
	cert, key := writeCert(t)
	tc, err := TLS{CAFile: cert, CertFile: cert, KeyFile: key, ServerName: "broker"}.Config()
	if err != nil {
		t.Fatal(err)
	}
	if tc.RootCAs == nil || len(tc.Certificates) != 1 || tc.ServerName != "broker" || tc.InsecureSkipVerify {
		t.Fatalf("tls config %+v", tc)
	}
	if _, err := (TLS{CAFile: key}).Config(); err == nil {
		t.Error("a key file accepted as CA")
	}
	if _, err := (TLS{CAFile: filepath.Join(t.TempDir(), "missing.pem")}).Config(); err == nil {
		t.Error("a missing CA file accepted")
	}
	if _, err := (TLS{CertFile: cert}).Config(); err == nil {
		t.Error("a certificate without key accepted")
	}
}
