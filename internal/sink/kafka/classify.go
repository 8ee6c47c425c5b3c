package kafka

import (
	"context"
	"errors"
	"fmt"

	"github.com/twmb/franz-go/pkg/kerr"
	"github.com/twmb/franz-go/pkg/kgo"

	"github.com/outbox-relay/outbox-relay/internal/sink"
)

// class is what a produce error means for the message.
type class int

const (
	// retryable: trying again later may succeed.
	retryable class = iota
	// badRecord: Kafka rejected the record, or the batch it was in.
	badRecord
	// badTopic: the destination cannot take any record.
	badTopic
)

// environmental lists non-retriable broker errors that are about the client,
// its credentials or the cluster rather than the message. They hit every
// message alike, so retrying keeps order and dead-lettering would empty the
// outbox into the dead-letter table over a misconfiguration.
var environmental = map[*kerr.Error]bool{
	kerr.UnknownServerError:                 true,
	kerr.TopicAuthorizationFailed:           true,
	kerr.ClusterAuthorizationFailed:         true,
	kerr.TransactionalIDAuthorizationFailed: true,
	kerr.SaslAuthenticationFailed:           true,
	kerr.UnsupportedSaslMechanism:           true,
	kerr.IllegalSaslState:                   true,
	kerr.UnsupportedVersion:                 true,
	kerr.UnsupportedForMessageFormat:        true,
	kerr.UnsupportedCompressionType:         true,
	kerr.InvalidRequiredAcks:                true,
	kerr.InvalidRequest:                     true,
	kerr.OutOfOrderSequenceNumber:           true,
	kerr.DuplicateSequenceNumber:            true,
	kerr.UnknownProducerID:                  true,
	kerr.InvalidProducerEpoch:               true,
	kerr.InvalidProducerIDMapping:           true,
	kerr.ProducerFenced:                     true,
}

// classify looks only at sentinel errors and Kafka error codes, never at
// error text.
//
// A non-retriable broker error must be terminal: it comes back on the first
// answer, while later messages of the same partition may still be on their
// way in fresh batches and succeed. Retrying the failed message later would
// deliver it after its successors, so it goes to the dead-letter table.
// Retryable failures take retries or a timeout to surface, by which time the
// later messages are buffered behind them and fail with them.
func classify(err error) class {
	switch {
	// Give-ups come first: a delivery timeout wraps the last load error,
	// which may be an unknown topic that auto-creation is about to fix.
	case errors.Is(err, kgo.ErrRecordTimeout),
		errors.Is(err, kgo.ErrRecordRetries),
		errors.Is(err, kgo.ErrClientClosed),
		errors.Is(err, kgo.ErrAborting),
		errors.Is(err, kgo.ErrMaxBuffered),
		errors.Is(err, context.Canceled),
		errors.Is(err, context.DeadlineExceeded):
		return retryable
	case errors.Is(err, kerr.UnknownTopicOrPartition), errors.Is(err, kerr.UnknownTopicID):
		// A topic that does not exist yet is an operations problem (it
		// is about to be created, or its creation was forgotten), not a
		// poison message: the row backs off and is dead-lettered only
		// once its retry budget is spent. Every message to the topic
		// fails alike, so retrying keeps order.
		return retryable
	case errors.Is(err, kerr.InvalidTopicException):
		return badTopic
	case errors.Is(err, kerr.CorruptMessage): // retriable code, but franz-go gives up at once
		return badRecord
	}
	ke, ok := errors.AsType[*kerr.Error](err)
	if !ok || ke.Retriable || environmental[ke] {
		return retryable
	}
	return badRecord // MESSAGE_TOO_LARGE, RECORD_LIST_TOO_LARGE, INVALID_RECORD, ...
}

// down reports whether err is a failure of the cluster or of the relay's
// access to it rather than of the message: the record could not be
// produced within the delivery timeout (no broker reachable, no leader), no
// connection could be made, or the cluster refuses the relay's credentials.
// A topic of its own (unknown, not authorized) is the destination's
// problem, not the cluster's: such a row spends its budget as before, so
// that a topic name mistyped in one row does not hold its key for ever.
func down(err error) bool {
	switch {
	case errors.Is(err, kerr.UnknownTopicOrPartition), errors.Is(err, kerr.UnknownTopicID),
		errors.Is(err, kerr.TopicAuthorizationFailed):
		return false
	case errors.Is(err, kgo.ErrRecordTimeout), sink.IsConnectError(err),
		errors.Is(err, kerr.ClusterAuthorizationFailed), errors.Is(err, kerr.SaslAuthenticationFailed):
		return true
	}
	return false
}

// result turns a produce error into Publish's answer for the message.
func result(topic string, err error) error {
	if err == nil {
		return nil
	}
	err = fmt.Errorf("produce to topic %q: %w", topic, err)
	switch {
	case classify(err) != retryable:
		return sink.Terminal(err)
	case down(err):
		return sink.Down(err)
	}
	return err
}
