package sink

import (
	"crypto/tls"
	"crypto/x509"
	"errors"
	"fmt"
	"io"
	"net"
	"syscall"
	"testing"
)

func TestDownKeepsTerminalAndWraps(t *testing.T) {
	cause := errors.New("connect: refused")
	d := Down(cause)
	if !IsDown(d) || !errors.Is(d, cause) || d.Error() != cause.Error() {
		t.Fatalf("Down(%v) = %v, down %v", cause, d, IsDown(d))
	}
	if !IsDown(fmt.Errorf("publish: %w", d)) {
		t.Error("a wrapped down error is not down")
	}
	if Down(nil) != nil {
		t.Error("Down(nil) is not nil")
	}
	term := Terminal(errors.New("too large"))
	if got := Down(term); IsDown(got) || !IsTerminal(got) {
		t.Errorf("Down of a terminal error: down %v, terminal %v; want it terminal", IsDown(got), IsTerminal(got))
	}
	if IsDown(cause) {
		t.Error("a plain error is down")
	}
}

func TestIsConnectError(t *testing.T) {
	for _, tc := range []struct {
		name string
		err  error
		want bool
	}{
		{"dial refused", &net.OpError{Op: "dial", Net: "tcp", Err: syscall.ECONNREFUSED}, true},
		{"dial timeout, wrapped", fmt.Errorf("post: %w", &net.OpError{Op: "dial", Net: "tcp", Err: errors.New("i/o timeout")}), true},
		{"name not resolved", &net.DNSError{Err: "no such host", Name: "hooks.example"}, true},
		{"refused without an OpError", fmt.Errorf("x: %w", syscall.ECONNREFUSED), true},
		{"certificate", &tls.CertificateVerificationError{Err: x509.UnknownAuthorityError{}}, true},
		{"read reset", &net.OpError{Op: "read", Net: "tcp", Err: syscall.ECONNRESET}, false},
		{"EOF", io.EOF, false},
		{"other", errors.New("HTTP 500"), false},
	} {
		if got := IsConnectError(tc.err); got != tc.want {
			t.Errorf("%s: %v, want %v", tc.name, got, tc.want)
		}
	}
}
