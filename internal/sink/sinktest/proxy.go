package sinktest

import (
	"io"
	"net"
	"sync"
	"testing"
	"time"
)

// Proxy forwards TCP connections to a server and can cut them: Cut closes
// every open connection and refuses new ones for a while, as a network
// failure or a server restart would, without touching the shared server.
type Proxy struct {
	ln       net.Listener
	upstream string

	mu    sync.Mutex
	conns map[net.Conn]bool
	until time.Time // refuse connections before this
}

// NewProxy listens on a free local port and forwards to upstream. It stops
// when the test ends.
func NewProxy(t testing.TB, upstream string) *Proxy {
	t.Helper()
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	p := &Proxy{ln: ln, upstream: upstream, conns: map[net.Conn]bool{}}
	go p.serve()
	t.Cleanup(p.close)
	return p
}

// Addr is the proxy's address (host:port).
func (p *Proxy) Addr() string { return p.ln.Addr().String() }

// Cut closes every open connection and refuses new ones for d.
func (p *Proxy) Cut(d time.Duration) {
	p.mu.Lock()
	defer p.mu.Unlock()
	p.until = time.Now().Add(d)
	for c := range p.conns {
		_ = c.Close()
	}
}

func (p *Proxy) close() {
	_ = p.ln.Close()
	p.Cut(0)
}

func (p *Proxy) serve() {
	for {
		c, err := p.ln.Accept()
		if err != nil {
			return
		}
		p.mu.Lock()
		refuse := time.Now().Before(p.until)
		p.mu.Unlock()
		if refuse {
			_ = c.Close()
			continue
		}
		go p.forward(c)
	}
}

func (p *Proxy) track(cs ...net.Conn) bool {
	p.mu.Lock()
	defer p.mu.Unlock()
	if time.Now().Before(p.until) {
		return false
	}
	for _, c := range cs {
		p.conns[c] = true
	}
	return true
}

func (p *Proxy) untrack(cs ...net.Conn) {
	p.mu.Lock()
	defer p.mu.Unlock()
	for _, c := range cs {
		delete(p.conns, c)
		_ = c.Close()
	}
}

func (p *Proxy) forward(client net.Conn) {
	server, err := net.DialTimeout("tcp", p.upstream, 5*time.Second)
	if err != nil {
		_ = client.Close()
		return
	}
	if !p.track(client, server) {
		p.untrack(client, server)
		return
	}
	defer p.untrack(client, server)
	done := make(chan struct{}, 2)
	pipe := func(dst, src net.Conn) {
		_, _ = io.Copy(dst, src)
		done <- struct{}{}
	}
	go pipe(server, client)
	go pipe(client, server)
	<-done // either side closing ends both
}
