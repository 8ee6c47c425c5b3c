package kafka

import (
	"context"
	"errors"
	"fmt"
	"testing"

	"github.com/twmb/franz-go/pkg/kerr"
	"github.com/twmb/franz-go/pkg/kgo"

	"github.com/outbox-relay/outbox-relay/internal/sink"
)

func TestClassify(t *testing.T) {
	t.Parallel()
	for _, tc := range []struct {
		name       string
		err        error
		autoCreate bool
		want       class
	}{
		{"record timeout", kgo.ErrRecordTimeout, false, retryable},
		{"timeout after unknown topic", fmt.Errorf("%w, last err: %w", kgo.ErrRecordTimeout, kerr.UnknownTopicOrPartition), false, retryable},
		{"retries", kgo.ErrRecordRetries, false, retryable},
		{"client closed", kgo.ErrClientClosed, false, retryable},
		{"canceled", context.Canceled, false, retryable},
		{"deadline", fmt.Errorf("x: %w", context.DeadlineExceeded), false, retryable},
		{"retriable code", kerr.NotEnoughReplicas, false, retryable},
		{"leader moved", kerr.NotLeaderForPartition, false, retryable},
		{"plain error", errors.New("broken pipe"), false, retryable},
		{"topic authorization", kerr.TopicAuthorizationFailed, false, retryable},
		{"cluster authorization", kerr.ClusterAuthorizationFailed, false, retryable},
		{"unknown server error", kerr.UnknownServerError, false, retryable},
		{"too large", kerr.MessageTooLarge, false, badRecord},
		{"too large, wrapped", fmt.Errorf("%w (uncompressed_bytes=9)", kerr.MessageTooLarge), false, badRecord},
		{"record list too large", kerr.RecordListTooLarge, false, badRecord},
		{"invalid record", kerr.InvalidRecord, false, badRecord},
		{"corrupt", kerr.CorruptMessage, false, badRecord},
		{"invalid timestamp", kerr.InvalidTimestamp, false, badRecord},
		{"other non-retriable", kerr.PolicyViolation, false, badRecord},
		{"invalid topic", kerr.InvalidTopicException, false, badTopic},
		{"unknown topic", kerr.UnknownTopicOrPartition, false, badTopic},
		{"unknown topic id", kerr.UnknownTopicID, false, badTopic},
		{"unknown topic, auto-create", kerr.UnknownTopicOrPartition, true, retryable},
	} {
		if got := classify(tc.err, tc.autoCreate); got != tc.want {
			t.Errorf("%s: got class %d, want %d", tc.name, got, tc.want)
		}
	}
}

func TestResult(t *testing.T) {
	t.Parallel()
	if result("t", nil, false) != nil {
		t.Fatal("nil error became non-nil")
	}
	err := result("t", kerr.InvalidRecord, false)
	if !sink.IsTerminal(err) || !errors.Is(err, kerr.InvalidRecord) {
		t.Fatalf("invalid record: got %v, terminal %v", err, sink.IsTerminal(err))
	}
	if want := `produce to topic "t": INVALID_RECORD: ` + kerr.InvalidRecord.Description; err.Error() != want {
		t.Fatalf("got %q, want %q", err, want)
	}
	err = result("t", kgo.ErrRecordRetries, false)
	if sink.IsTerminal(err) || !errors.Is(err, kgo.ErrRecordRetries) {
		t.Fatalf("retries: got %v, terminal %v", err, sink.IsTerminal(err))
	}
}
