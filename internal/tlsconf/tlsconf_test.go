package tlsconf

import (
	"crypto/ecdsa"
	"crypto/elliptic"
	"crypto/rand"
	"crypto/tls"
	"crypto/x509"
	"crypto/x509/pkix"
	"encoding/pem"
	"math/big"
	"net"
	"os"
	"path/filepath"
	"testing"
	"time"
)

func TestProblems(t *testing.T) {
	t.Parallel()
	if ps := (Config{}).Problems(); len(ps) != 0 {
		t.Fatalf("zero config: %v", ps)
	}
	ps := Config{CertFile: "c.pem", CAFile: "/nonexistent/ca.pem"}.Problems()
	fields := map[string]bool{}
	for _, p := range ps {
		fields[p.Field] = true
	}
	for _, f := range []string{"tls.cert_file", "tls.ca_file"} {
		if !fields[f] {
			t.Errorf("no problem for %s in %v", f, ps)
		}
	}
}

// TestMutualTLS dials a TLS server that requires a client certificate, with
// the configuration Load builds from PEM files.
func TestMutualTLS(t *testing.T) {
	t.Parallel()
	dir := t.TempDir()
	ca, caKey := newCert(t, nil, nil, "test ca")
	server, serverKey := newCert(t, ca, caKey, "server")
	client, clientKey := newCert(t, ca, caKey, "client")
	cfg := Config{
		Enabled:  true,
		CAFile:   writePEM(t, dir, "ca.pem", ca.Raw, nil),
		CertFile: writePEM(t, dir, "client.pem", client.Raw, nil),
		KeyFile:  writePEM(t, dir, "client-key.pem", nil, clientKey),
	}
	pool := x509.NewCertPool()
	pool.AddCert(ca)
	ln, err := tls.Listen("tcp", "127.0.0.1:0", &tls.Config{
		Certificates: []tls.Certificate{{Certificate: [][]byte{server.Raw}, PrivateKey: serverKey}},
		ClientCAs:    pool,
		ClientAuth:   tls.RequireAndVerifyClientCert,
		MinVersion:   tls.VersionTLS12,
	})
	if err != nil {
		t.Fatal(err)
	}
	defer ln.Close()
	go func() {
		for {
			c, err := ln.Accept()
			if err != nil {
				return
			}
			_ = c.(*tls.Conn).Handshake()
			_ = c.Close()
		}
	}()
	dial := func(c Config) error {
		tc, err := c.Load("127.0.0.1")
		if err != nil {
			return err
		}
		conn, err := tls.DialWithDialer(&net.Dialer{Timeout: 5 * time.Second}, "tcp", ln.Addr().String(), tc)
		if err != nil {
			return err
		}
		defer conn.Close()
		_ = conn.SetDeadline(time.Now().Add(5 * time.Second))
		_, err = conn.Read(make([]byte, 1)) // the server's verdict on our certificate
		if err != nil && err.Error() == "EOF" {
			return nil
		}
		return err
	}
	if err := dial(cfg); err != nil {
		t.Fatalf("mutual TLS: %v", err)
	}
	noCert := cfg
	noCert.CertFile, noCert.KeyFile = "", ""
	if err := dial(noCert); err == nil {
		t.Error("the server accepted a connection without a client certificate")
	}
	noCA := cfg
	noCA.CAFile = ""
	if err := dial(noCA); err == nil {
		t.Error("a certificate from an untrusted CA was accepted")
	}
	bad := cfg
	bad.CAFile = bad.KeyFile // PEM, but no certificate
	if _, err := bad.Load("127.0.0.1"); err == nil {
		t.Error("a CA file without certificates loaded")
	}
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
