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
