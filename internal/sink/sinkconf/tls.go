package sinkconf

import (
	"crypto/tls"
	"crypto/x509"
	"fmt"
	"os"

	"github.com/outbox-relay/outbox-relay/internal/sink"
)

// TLS secures a broker connection. The zero value means: TLS only when the
// server's URL asks for it (rediss://, tls://), verified against the system
// roots.
type TLS struct {
	// CAFile is a PEM file of the certificates that may sign the server's
	// certificate, instead of the system roots.
	CAFile string `yaml:"ca_file"`
	// CertFile and KeyFile are the client's PEM certificate and key, for
	// servers that verify clients. They go together.
	CertFile string `yaml:"cert_file"`
	KeyFile  string `yaml:"key_file"`
	// ServerName overrides the host name the server's certificate must
	// carry (default: the host of the URL).
	ServerName string `yaml:"server_name"`
	// InsecureSkipVerify accepts any server certificate. For tests only.
	InsecureSkipVerify bool `yaml:"insecure_skip_verify"`
}

// IsZero reports whether no TLS setting is given.
func (t TLS) IsZero() bool { return t == TLS{} }

// Problems lists invalid settings; fields are relative to the block's
// parent and start with prefix ("tls").
func (t TLS) Problems(prefix string) []sink.Problem {
	var ps []sink.Problem
	if t.CertFile != "" && t.KeyFile == "" {
		ps = append(ps, sink.Problem{Field: prefix + ".key_file", Msg: "required with cert_file"})
	}
	if t.KeyFile != "" && t.CertFile == "" {
		ps = append(ps, sink.Problem{Field: prefix + ".cert_file", Msg: "required with key_file"})
	}
	return ps
}

// Config builds the tls.Config the settings describe, reading the files.
func (t TLS) Config() (*tls.Config, error) {
	tc := &tls.Config{
		MinVersion:         tls.VersionTLS12,
		ServerName:         t.ServerName,
		InsecureSkipVerify: t.InsecureSkipVerify, //nolint:gosec // opt-in, documented as for tests
	}
	if t.CAFile != "" {
		pem, err := os.ReadFile(t.CAFile)
		if err != nil {
			return nil, fmt.Errorf("tls ca_file: %w", err)
		}
		tc.RootCAs = x509.NewCertPool()
		if !tc.RootCAs.AppendCertsFromPEM(pem) {
			return nil, fmt.Errorf("tls ca_file %s: no PEM certificate found", t.CAFile)
		}
	}
	if (t.CertFile == "") != (t.KeyFile == "") {
		return nil, fmt.Errorf("tls: cert_file and key_file go together")
	}
	if t.CertFile != "" {
		cert, err := tls.LoadX509KeyPair(t.CertFile, t.KeyFile)
		if err != nil {
			return nil, fmt.Errorf("tls client certificate: %w", err)
		}
		tc.Certificates = []tls.Certificate{cert}
	}
	return tc, nil
}
