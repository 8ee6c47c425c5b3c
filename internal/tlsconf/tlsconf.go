// Package tlsconf is the `tls:` block of a sink's configuration and the
// crypto/tls configuration it describes: a CA to trust, a client
// certificate, and an opt-in to skip verification.
package tlsconf

import (
	"crypto/tls"
	"crypto/x509"
	"errors"
	"fmt"
	"os"

	"github.com/outbox-relay/outbox-relay/internal/config/sinkblock"
)

// Config secures a sink's connection. The zero value is off.
type Config struct {
	// Enabled turns TLS on even when the URL's scheme does not.
	Enabled bool `yaml:"enabled"`
	// CAFile is a PEM bundle of the CAs to trust instead of the system's.
	CAFile string `yaml:"ca_file"`
	// CertFile and KeyFile are the client certificate and its key (PEM),
	// for servers that ask for one.
	CertFile string `yaml:"cert_file"`
	KeyFile  string `yaml:"key_file"`
	// ServerName overrides the name the server's certificate is checked
	// against (default: the URL's host).
	ServerName string `yaml:"server_name"`
	// InsecureSkipVerify accepts any server certificate. For tests only.
	InsecureSkipVerify bool `yaml:"insecure_skip_verify"`
}

// Problems reports invalid settings, Field relative to the block ("tls.").
func (c Config) Problems() []sinkblock.Problem {
	var ps []sinkblock.Problem
	if (c.CertFile == "") != (c.KeyFile == "") {
		ps = append(ps, sinkblock.Problem{Field: "tls.cert_file", Msg: "cert_file and key_file go together"})
	}
	for _, f := range []struct{ field, path string }{
		{"tls.ca_file", c.CAFile}, {"tls.cert_file", c.CertFile}, {"tls.key_file", c.KeyFile},
	} {
		if f.path == "" {
			continue
		}
		if _, err := os.Stat(f.path); err != nil {
			ps = append(ps, sinkblock.Problem{Field: f.field, Msg: err.Error()})
		}
	}
	return ps
}

// Load builds the crypto/tls configuration for a connection to host (used
// as the server name unless ServerName is set).
func (c Config) Load(host string) (*tls.Config, error) {
	tc := &tls.Config{
		MinVersion:         tls.VersionTLS12,
		ServerName:         host,
		InsecureSkipVerify: c.InsecureSkipVerify, //nolint:gosec // opt-in, documented as test only
	}
	if c.ServerName != "" {
		tc.ServerName = c.ServerName
	}
	if c.CAFile != "" {
		pem, err := os.ReadFile(c.CAFile)
		if err != nil {
			return nil, fmt.Errorf("tls: %w", err)
		}
		tc.RootCAs = x509.NewCertPool()
		if !tc.RootCAs.AppendCertsFromPEM(pem) {
			return nil, fmt.Errorf("tls: no certificate in %s", c.CAFile)
		}
	}
	if (c.CertFile == "") != (c.KeyFile == "") {
		return nil, errors.New("tls: cert_file and key_file go together")
	}
	if c.CertFile != "" {
		cert, err := tls.LoadX509KeyPair(c.CertFile, c.KeyFile)
		if err != nil {
			return nil, fmt.Errorf("tls: %w", err)
		}
		tc.Certificates = []tls.Certificate{cert}
	}
	return tc, nil
}
