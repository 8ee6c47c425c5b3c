package e2e

import (
	"encoding/binary"
	"errors"
	"net"
	"sync"
	"sync/atomic"

	"github.com/twmb/franz-go/pkg/kfake"
	"github.com/twmb/franz-go/pkg/kmsg"
)

// commitCutter makes the broker apply some transaction commits (EndTxn)
// and lose their answers: it sits on the broker's side of each client
// connection, and when the answer to a commit is written, and cut says so,
// it closes the connection in place of writing the answer, then calls
// after with the commit's transactional id. The client cannot tell whether
// the commit took effect, as when a broker fails between doing the work
// and answering.
type commitCutter struct {
	cut   func() bool
	after func(txnID string)
	cuts  atomic.Int64
}

// listen is the cluster's ListenFn.
func (a *commitCutter) listen() kfake.Opt {
	return kfake.ListenFn(func(network, address string) (net.Listener, error) {
		l, err := net.Listen(network, address)
		if err != nil {
			return nil, err
		}
		return cutListener{Listener: l, a: a}, nil
	})
}

type cutListener struct {
	net.Listener
	a *commitCutter
}

func (l cutListener) Accept() (net.Conn, error) {
	c, err := l.Listener.Accept()
	if err != nil {
		return nil, err
	}
	return &cutConn{Conn: c, a: l.a, watched: map[int32]string{}}, nil
}

// cutConn follows the frames of one connection: requests read (size,
// key, version, correlation id, client id, then the body) and answers
// written (size, correlation id).
type cutConn struct {
	net.Conn
	a       *commitCutter
	mu      sync.Mutex
	in, out []byte           // bytes of the frame being read or written
	watched map[int32]string // transactional ids of commits by correlation id
	cutOff  bool
}

var errCut = errors.New("answer cut")

func (c *cutConn) Read(p []byte) (int, error) {
	n, err := c.Conn.Read(p)
	c.mu.Lock()
	defer c.mu.Unlock()
	c.in = append(c.in, p[:n]...)
	for len(c.in) >= 12 {
		size := int(binary.BigEndian.Uint32(c.in))
		if len(c.in) < 4+size {
			break
		}
		if id, txnID, ok := endTxn(c.in[4 : 4+size]); ok {
			c.watched[id] = txnID
		}
		c.in = c.in[4+size:]
	}
	return n, err
}

func (c *cutConn) Write(p []byte) (int, error) {
	c.mu.Lock()
	if c.cutOff {
		c.mu.Unlock()
		return 0, errCut
	}
	c.out = append(c.out, p...)
	cut, cutID := false, ""
	for len(c.out) >= 8 {
		size := int(binary.BigEndian.Uint32(c.out))
		id := int32(binary.BigEndian.Uint32(c.out[4:]))
		if txnID, ok := c.watched[id]; ok {
			delete(c.watched, id)
			if c.a.cut() {
				cut, cutID = true, txnID
				break
			}
		}
		if len(c.out) < 4+size {
			break
		}
		c.out = c.out[4+size:]
	}
	if cut {
		c.cutOff = true
		c.mu.Unlock()
		c.a.cuts.Add(1)
		_ = c.Conn.Close()
		if c.a.after != nil {
			c.a.after(cutID)
		}
		return 0, errCut
	}
	c.mu.Unlock()
	return c.Conn.Write(p)
}

// endTxn reads a request frame (without its size): a commit's correlation
// id and transactional id, ok false for any other request.
func endTxn(frame []byte) (id int32, txnID string, ok bool) {
	if len(frame) < 10 || kmsg.Key(binary.BigEndian.Uint16(frame)) != kmsg.EndTxn {
		return 0, "", false
	}
	req := &kmsg.EndTxnRequest{Version: int16(binary.BigEndian.Uint16(frame[2:]))}
	id = int32(binary.BigEndian.Uint32(frame[4:]))
	body := frame[8:]
	if n := int(int16(binary.BigEndian.Uint16(body))); n > 0 { // the client id
		body = body[n:]
	}
	body = body[2:]
	if req.IsFlexible() {
		body = body[1:] // no tagged fields in the header
	}
	if err := req.ReadFrom(body); err != nil {
		return 0, "", false
	}
	return id, req.TransactionalID, true
}
