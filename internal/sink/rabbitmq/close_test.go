package rabbitmq

import (
	"errors"
	"testing"

	amqp "github.com/rabbitmq/amqp091-go"

	"github.com/outbox-relay/outbox-relay/internal/sink"
)

// TestCloseError: messages left unconfirmed by a lost connection are the
// broker's failure (no attempt charged); by a channel exception, which a
// message may have caused (406 for a message over max_message_size), their
// own, retryable and charged.
func TestCloseError(t *testing.T) {
	lost := &amqp.Error{Code: amqp.FrameError, Reason: "read tcp: i/o timeout", Recover: false}
	if err := closeError(lost); !sink.IsDown(err) || !errors.Is(err, errChannelClosed) || sink.IsTerminal(err) {
		t.Errorf("connection lost: %v, down %v; want the sink down", err, sink.IsDown(err))
	}
	exception := &amqp.Error{Code: amqp.PreconditionFailed, Reason: "message size exceeds max", Server: true, Recover: true}
	if err := closeError(exception); sink.IsDown(err) || sink.IsTerminal(err) || !errors.Is(err, errChannelClosed) {
		t.Errorf("channel exception: %v, down %v; want a retryable failure of the message", err, sink.IsDown(err))
	}
	if err := closeError(nil); sink.IsDown(err) || !errors.Is(err, errChannelClosed) {
		t.Errorf("closed by us: %v", err)
	}
}
