package nats

import (
	"errors"
	"fmt"

	natsclient "github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"

	"github.com/outbox-relay/outbox-relay/internal/sink"
)

// class is what a publish error means for the message.
type class int

const (
	// retryable: trying again later may succeed.
	retryable class = iota
	// badMessage: this message can never be stored.
	badMessage
	// badSubject: nothing published to this subject can be stored.
	badSubject
)

// JetStream API error codes that refuse a message for good.
const (
	codeMessageExceedsMaximum jetstream.ErrorCode = 10054
	codeStreamNotFound        jetstream.ErrorCode = 10059
	codeHeadersExceedMaximum  jetstream.ErrorCode = 10097
	codeStreamSealed          jetstream.ErrorCode = 10109
)

// classify looks at sentinel errors and JetStream error codes, never at
// error text. Anything it does not know is retryable: environmental
// failures (JetStream disabled, resources exhausted, stream limits with
// discard-new) hit every message alike, and retrying keeps order.
func classify(err error) class {
	switch {
	case errors.Is(err, jetstream.ErrNoStreamResponse), errors.Is(err, natsclient.ErrNoResponders):
		return badSubject
	case errors.Is(err, natsclient.ErrMaxPayload), errors.Is(err, natsclient.ErrBadSubject),
		errors.Is(err, natsclient.ErrBadHeaderMsg), errors.Is(err, errBadHeader):
		return badMessage
	}
	var api *jetstream.APIError
	if errors.As(err, &api) {
		switch api.ErrorCode {
		case codeStreamNotFound, codeStreamSealed:
			return badSubject
		case codeMessageExceedsMaximum, codeHeadersExceedMaximum:
			return badMessage
		}
	}
	return retryable
}

// down reports whether err is a failure of the connection rather than of
// the message: no server could be reached, or the connection is gone or
// being remade.
func down(err error) bool {
	return sink.IsConnectError(err) || errors.Is(err, natsclient.ErrNoServers) ||
		errors.Is(err, natsclient.ErrConnectionClosed) || errors.Is(err, natsclient.ErrConnectionReconnecting) ||
		errors.Is(err, natsclient.ErrDisconnected) || errors.Is(err, natsclient.ErrReconnectBufExceeded) ||
		errors.Is(err, natsclient.ErrAuthorization) || errors.Is(err, natsclient.ErrAuthExpired) ||
		// Asked before the first connection is made: the client knows no
		// server yet, so it knows none that takes headers.
		errors.Is(err, natsclient.ErrHeadersNotSupported)
}

// result turns a publish error into Publish's answer for a message.
func result(subject string, err error) error {
	if err == nil || sink.IsTerminal(err) {
		return err
	}
	err = fmt.Errorf("publish to subject %q: %w", subject, err)
	switch {
	case classify(err) != retryable:
		return sink.Terminal(err)
	case down(err):
		return sink.Down(err)
	}
	return err
}
