// Package sink defines the seam between the relay engine and a message
// broker. A Publisher publishes a batch of messages and reports one result per
// message, each classified as retryable or terminal.
package sink

import (
	"context"
	"crypto/tls"
	"errors"
	"fmt"
	"net"
	"syscall"
	"time"
)

// Header is one message header. Order is kept as given.
type Header struct {
	Key   string
	Value []byte
}

// Message is one event ready to leave the relay.
type Message struct {
	// ID is the stable event id (the outbox row id as text). Sinks carry it
	// so that consumers can deduplicate (Kafka header, Nats-Msg-Id, ...).
	ID string
	// Destination is the topic, subject, channel or URL of the route.
	Destination string
	// Key is the message key (Kafka record key). May be nil.
	Key []byte
	// PartitionKey, when not nil, chooses the partition instead of Key.
	PartitionKey []byte
	Headers      []Header
	Payload      []byte
	// Receipt, when not nil, is filled by sinks that learn something of
	// the destination's answer (the webhook sink: its reference, its code,
	// the request's duration).
	Receipt *Receipt
}

// Receipt is what a destination answered to one message. Empty fields are
// unknown.
type Receipt struct {
	// Reference is the destination's id for the message (a payment rail's
	// reference).
	Reference string
	// Code is the destination's answer code: an error code from the body,
	// else the HTTP status; TIMEOUT when no answer came in time.
	Code    string
	Latency time.Duration
}

// Publisher publishes batches of messages. Implementations must be safe for
// concurrent use by several goroutines.
//
// Ordering contract: messages of one key given in one Publish call are
// delivered in the order given, and if one of them fails, every later message
// of that key in the call fails too (never a later one delivered after an
// earlier one failed). The engine relies on this for per-key order.
type Publisher interface {
	// Publish sends msgs and blocks until each has a result. The returned
	// slice has one entry per message: nil when the broker confirmed it, else
	// an error that IsTerminal classifies.
	Publish(ctx context.Context, msgs []*Message) []error
	// MaxMessageBytes is the largest payload the sink accepts; larger
	// messages are dead-lettered without an attempt. Zero means no limit.
	MaxMessageBytes() int
	// Close flushes what is buffered and releases the connection.
	Close(ctx context.Context) error
}

// ErrTxnUnknown says a transaction's end was asked for and no answer
// came: it may have committed or not. Only reading what the sink holds
// (an exactly-once takeover) can tell.
var ErrTxnUnknown = errors.New("the transaction's outcome is unknown")

// TerminalError marks a failure that no retry can fix (message too large,
// invalid payload, unknown destination). Such messages go to the dead-letter
// table at once.
type TerminalError struct {
	Err error
}

func (e *TerminalError) Error() string { return e.Err.Error() }
func (e *TerminalError) Unwrap() error { return e.Err }

// Terminal wraps err as a terminal error.
func Terminal(err error) error {
	if err == nil {
		return nil
	}
	return &TerminalError{Err: err}
}

// IsTerminal reports whether err (or anything it wraps) is terminal. Every
// other error is retryable.
func IsTerminal(err error) bool {
	var t *TerminalError
	return errors.As(err, &t)
}

// DownError marks a failure of the sink rather than of the message: the
// destination could not be reached (no connection, refused, a handshake that
// failed, a connection lost before the answer) or refuses the relay itself
// (its credentials). Every message would fail alike, so none is charged an
// attempt: the engine holds the rows as it does for an UnavailableError, and
// they wait, however long the outage, instead of spending their retry budget
// and ending in the dead-letter table. Such failures still count toward
// opening the sink's circuit.
type DownError struct {
	Err error
}

func (e *DownError) Error() string { return e.Err.Error() }
func (e *DownError) Unwrap() error { return e.Err }

// Down wraps err as a failure of the sink. A terminal error stays terminal.
func Down(err error) error {
	if err == nil || IsTerminal(err) || IsDown(err) {
		return err
	}
	return &DownError{Err: err}
}

// IsDown reports whether err (or anything it wraps) is a failure of the sink.
func IsDown(err error) bool {
	var d *DownError
	return errors.As(err, &d)
}

// IsConnectError reports whether err is a failure to open a connection: a
// dial that was refused, timed out or found no route, a name that did not
// resolve, a server certificate that does not verify. Nothing was sent, so
// the message is not at fault.
func IsConnectError(err error) bool {
	if _, ok := errors.AsType[*net.DNSError](err); ok {
		return true
	}
	if _, ok := errors.AsType[*tls.CertificateVerificationError](err); ok {
		return true
	}
	if op, ok := errors.AsType[*net.OpError](err); ok && op.Op == "dial" {
		return true
	}
	return errors.Is(err, syscall.ECONNREFUSED) || errors.Is(err, syscall.EHOSTUNREACH) || errors.Is(err, syscall.ENETUNREACH)
}

// OrderKey is what orders m among the messages of a call: its partition key,
// else its key. Messages with neither return "" and have no order to keep.
func OrderKey(m *Message) string {
	key := m.PartitionKey
	if key == nil {
		key = m.Key
	}
	if key == nil {
		return ""
	}
	return string(key)
}

// UnavailableError says a message was not sent, or not confirmed in time,
// because its sink is unavailable: the sink's circuit is open, or the call
// passed the sink's deadline. It is not the message's fault, so the engine
// charges no attempt: it leaves the row pending with its key held until
// Until, when the sink may be tried again.
type UnavailableError struct {
	Sink  string
	Until time.Time
	Err   error
}

func (e *UnavailableError) Error() string {
	return fmt.Sprintf("sink %s unavailable until %s: %v", e.Sink, e.Until.Format(time.RFC3339Nano), e.Err)
}
func (e *UnavailableError) Unwrap() error { return e.Err }

// Unavailable wraps err as the failure of a sink that may be tried again at
// until.
func Unavailable(sinkName string, until time.Time, err error) error {
	return &UnavailableError{Sink: sinkName, Until: until, Err: err}
}

// IsUnavailable reports whether err (or anything it wraps) says the sink was
// unavailable, and until when.
func IsUnavailable(err error) (time.Time, bool) {
	var u *UnavailableError
	if !errors.As(err, &u) {
		return time.Time{}, false
	}
	return u.Until, true
}
