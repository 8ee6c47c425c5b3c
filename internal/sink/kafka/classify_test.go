package kafka

import (
	"context"
	"errors"
	"fmt"
	"net"
	"syscall"
	"testing"

	"github.com/twmb/franz-go/pkg/kerr"
	"github.com/twmb/franz-go/pkg/kgo"

	"github.com/outbox-relay/outbox-relay/internal/sink"
)

func TestClassify(t *testing.T) {
	t.Parallel()
	for _, tc := range []struct {
		name string
		err  error
		want class
	}{
		{"record timeout", kgo.ErrRecordTimeout, retryable},
		{"timeout after unknown topic", fmt.Errorf("%w, last err: %w", kgo.ErrRecordTimeout, kerr.UnknownTopicOrPartition), retryable},
		{"retries", kgo.ErrRecordRetries, retryable},
		{"client closed", kgo.ErrClientClosed, retryable},
		{"canceled", context.Canceled, retryable},
		{"deadline", fmt.Errorf("x: %w", context.DeadlineExceeded), retryable},
		{"retriable code", kerr.NotEnoughReplicas, retryable},
		{"leader moved", kerr.NotLeaderForPartition, retryable},
		{"plain error", errors.New("broken pipe"), retryable},
		{"topic authorization", kerr.TopicAuthorizationFailed, retryable},
		{"cluster authorization", kerr.ClusterAuthorizationFailed, retryable},
		{"unknown server error", kerr.UnknownServerError, retryable},
		{"too large", kerr.MessageTooLarge, badRecord},
		{"too large, wrapped", fmt.Errorf("%w (uncompressed_bytes=9)", kerr.MessageTooLarge), badRecord},
		{"record list too large", kerr.RecordListTooLarge, badRecord},
		{"invalid record", kerr.InvalidRecord, badRecord},
		{"corrupt", kerr.CorruptMessage, badRecord},
		{"invalid timestamp", kerr.InvalidTimestamp, badRecord},
		{"other non-retriable", kerr.PolicyViolation, badRecord},
		{"invalid topic", kerr.InvalidTopicException, badTopic},
		{"unknown topic", kerr.UnknownTopicOrPartition, retryable},
		{"unknown topic id", kerr.UnknownTopicID, retryable},
	} {
		if got := classify(tc.err); got != tc.want {
			t.Errorf("%s: got class %d, want %d", tc.name, got, tc.want)
		}
	}
}

func TestResult(t *testing.T) {
	t.Parallel()
	if result("t", nil) != nil {
		t.Fatal("nil error became non-nil")
	}
	err := result("t", kerr.InvalidRecord)
	if !sink.IsTerminal(err) || !errors.Is(err, kerr.InvalidRecord) {
		t.Fatalf("invalid record: got %v, terminal %v", err, sink.IsTerminal(err))
	}
	if want := `produce to topic "t": INVALID_RECORD: ` + kerr.InvalidRecord.Description; err.Error() != want {
		t.Fatalf("got %q, want %q", err, want)
	}
	err = result("t", kgo.ErrRecordRetries)
	if sink.IsTerminal(err) || sink.IsDown(err) || !errors.Is(err, kgo.ErrRecordRetries) {
		t.Fatalf("retries: got %v, terminal %v, down %v", err, sink.IsTerminal(err), sink.IsDown(err))
	}
}

// TestResultDown: what says the cluster, not the message, failed charges
// no attempt; a topic's own failure still does.
func TestResultDown(t *testing.T) {
	t.Parallel()
	dial := &net.OpError{Op: "dial", Net: "tcp", Err: syscall.ECONNREFUSED}
	for _, tc := range []struct {
		name string
		err  error
		down bool
	}{
		{"delivery timeout", kgo.ErrRecordTimeout, true},
		{"delivery timeout after dial errors", fmt.Errorf("%w, last err: %w", kgo.ErrRecordTimeout, dial), true},
		{"dial", dial, true},
		{"cluster authorization", kerr.ClusterAuthorizationFailed, true},
		{"SASL", kerr.SaslAuthenticationFailed, true},
		{"delivery timeout on an unknown topic", fmt.Errorf("%w, last err: %w", kgo.ErrRecordTimeout, kerr.UnknownTopicOrPartition), false},
		{"topic authorization", kerr.TopicAuthorizationFailed, false},
		{"retries", kgo.ErrRecordRetries, false},
		{"not enough replicas", kerr.NotEnoughReplicas, false},
		{"invalid record", kerr.InvalidRecord, false},
	} {
		if got := sink.IsDown(result("t", tc.err)); got != tc.down {
			t.Errorf("%s: down %v, want %v", tc.name, got, tc.down)
		}
	}
}

// TestEveryNamedCode: every error code and sentinel classify.go names, with
// what result makes of it. Changing any one classification, in classify,
// environmental or down, fails a row; a code added to environmental without
// a row here fails the test too.
func TestEveryNamedCode(t *testing.T) {
	t.Parallel()
	type outcome int
	const (
		retry    outcome = iota // retryable, charged an attempt
		isDown                  // retryable, the cluster's fault: charged nothing
		terminal                // dead-lettered
	)
	names := [...]string{"retry", "down", "terminal"}
	dial := &net.OpError{Op: "dial", Net: "tcp", Err: syscall.ECONNREFUSED}
	unseen := map[*kerr.Error]bool{}
	for ke, env := range environmental {
		if env {
			unseen[ke] = true
		}
	}
	classes := [...]string{"retryable", "badRecord", "badTopic"}
	giveUp := func(sentinel error) error {
		return fmt.Errorf("%w, last err: %w", sentinel, kerr.InvalidTopicException)
	}
	timedOut := func(code error) error { return fmt.Errorf("%w, last err: %w", kgo.ErrRecordTimeout, code) }
	for _, tc := range []struct {
		err   error
		class class
		want  outcome
	}{
		// Give-ups: retried whatever last error they wrap, even one that
		// alone would be terminal.
		{giveUp(kgo.ErrRecordTimeout), retryable, isDown},
		{giveUp(kgo.ErrRecordRetries), retryable, retry},
		{giveUp(kgo.ErrClientClosed), retryable, retry},
		{giveUp(kgo.ErrAborting), retryable, retry},
		{giveUp(kgo.ErrMaxBuffered), retryable, retry},
		{giveUp(context.Canceled), retryable, retry},
		{giveUp(context.DeadlineExceeded), retryable, retry},
		{dial, retryable, isDown},
		// A topic that does not exist (yet), or that the relay may not
		// write to: the topic's problem, not the cluster's, even when the
		// delivery timed out on it.
		{kerr.UnknownTopicOrPartition, retryable, retry},
		{kerr.UnknownTopicID, retryable, retry},
		{timedOut(kerr.UnknownTopicOrPartition), retryable, retry},
		{timedOut(kerr.UnknownTopicID), retryable, retry},
		{timedOut(kerr.TopicAuthorizationFailed), retryable, retry},
		// A destination no record can go to.
		{kerr.InvalidTopicException, badTopic, terminal},
		// Retriable code on which franz-go gives up at once.
		{kerr.CorruptMessage, badRecord, terminal},
		// Environmental: the client, its credentials or the cluster.
		{kerr.UnknownServerError, retryable, retry},
		{kerr.TopicAuthorizationFailed, retryable, retry},
		{kerr.ClusterAuthorizationFailed, retryable, isDown},
		{kerr.TransactionalIDAuthorizationFailed, retryable, retry},
		{kerr.SaslAuthenticationFailed, retryable, isDown},
		{kerr.UnsupportedSaslMechanism, retryable, retry},
		{kerr.IllegalSaslState, retryable, retry},
		{kerr.UnsupportedVersion, retryable, retry},
		{kerr.UnsupportedForMessageFormat, retryable, retry},
		{kerr.UnsupportedCompressionType, retryable, retry},
		{kerr.InvalidRequiredAcks, retryable, retry},
		{kerr.InvalidRequest, retryable, retry},
		{kerr.OutOfOrderSequenceNumber, retryable, retry},
		{kerr.DuplicateSequenceNumber, retryable, retry},
		{kerr.UnknownProducerID, retryable, retry},
		{kerr.InvalidProducerEpoch, retryable, retry},
		{kerr.InvalidProducerIDMapping, retryable, retry},
		{kerr.ProducerFenced, retryable, retry},
		// The record's own fault (the default for other non-retriable codes).
		{kerr.MessageTooLarge, badRecord, terminal},
		{kerr.RecordListTooLarge, badRecord, terminal},
		{kerr.InvalidRecord, badRecord, terminal},
		// The defaults: what is not a Kafka code, or a retriable one, is
		// retried; any other code is the record's fault.
		{errors.New("broken pipe"), retryable, retry},
		{kerr.NotLeaderForPartition, retryable, retry},
		{kerr.PolicyViolation, badRecord, terminal},
	} {
		name := tc.err.Error()
		if got := classify(fmt.Errorf("wrapped: %w", tc.err)); got != tc.class {
			t.Errorf("%s: class %s, want %s", name, classes[got], classes[tc.class])
		}
		res := result("t", tc.err)
		got := retry
		switch {
		case res == nil:
			t.Errorf("%s: result nil", name)
			continue
		case sink.IsTerminal(res) && sink.IsDown(res):
			t.Errorf("%s: result %v is both terminal and down", name, res)
			continue
		case sink.IsTerminal(res):
			got = terminal
		case sink.IsDown(res):
			got = isDown
		}
		if got != tc.want {
			t.Errorf("%s: result %s, want %s", name, names[got], names[tc.want])
		}
		if !errors.Is(res, tc.err) {
			t.Errorf("%s: result %v does not wrap the error", name, res)
		}
		if ke, ok := errors.AsType[*kerr.Error](tc.err); ok && environmental[ke] {
			delete(unseen, ke)
		}
	}
	for ke := range unseen {
		t.Errorf("%s is environmental but has no row in this table", ke.Message)
	}
}
