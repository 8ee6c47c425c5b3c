package kafka

import (
	"errors"
	"testing"

	"github.com/twmb/franz-go/pkg/kerr"
	"github.com/twmb/franz-go/pkg/kgo"

	"github.com/outbox-relay/outbox-relay/internal/sink"
)

func ok(key string) outcome { return outcome{topic: "t", key: key, part: 0, state: stateOK} }
func failed(key string, err error) outcome {
	return outcome{topic: "t", key: key, part: 0, state: stateFailed, err: err}
}

// answers returns what Publish would answer for out: "ok", "retry",
// "held" (retryable, not sent), "terminal", or "isolate" (a candidate to be
// sent again on its own).
func answers(out []outcome) []string {
	s := make([]string, len(out))
	for i, o := range out {
		switch {
		case o.state == stateOK:
			s[i] = "ok"
		case o.state == stateFailed && classify(o.err) == badRecord:
			s[i] = "isolate"
		case errors.Is(o.err, errHeld) && !sink.IsTerminal(o.err):
			s[i] = "held"
		case o.state == stateFailed && classify(o.err) == retryable:
			s[i] = "retry"
		case o.state == stateFinal && sink.IsTerminal(o.err), o.state == stateFailed:
			s[i] = "terminal"
		default:
			s[i] = "?"
		}
	}
	return s
}

func TestOrder(t *testing.T) {
	t.Parallel()
	timeout, invalid, unknown := kgo.ErrRecordTimeout, kerr.InvalidRecord, kerr.UnknownTopicOrPartition
	for _, tc := range []struct {
		name string
		out  []outcome
		want []string
	}{
		{
			"failures buffered together stay as they are",
			[]outcome{ok("a"), failed("a", timeout), failed("a", timeout)},
			[]string{"ok", "retry", "retry"},
		},
		{
			"overtaken retryable failure becomes terminal",
			[]outcome{failed("a", timeout), ok("a")},
			[]string{"terminal", "ok"},
		},
		{
			"overtaken record failure is not sent again",
			[]outcome{failed("a", invalid), ok("a")},
			[]string{"terminal", "ok"},
		},
		{
			"other keys do not overtake",
			[]outcome{failed("a", timeout), ok("b"), failed("c", invalid), ok("b")},
			[]string{"retry", "ok", "isolate", "ok"},
		},
		{
			"keyless messages have no order",
			[]outcome{failed("", timeout), ok(""), failed("", invalid)},
			[]string{"retry", "ok", "isolate"},
		},
		{
			"record failures after a retryable failure are held",
			[]outcome{failed("a", timeout), failed("a", invalid), failed("b", invalid)},
			[]string{"retry", "held", "isolate"},
		},
		{
			"record failures of one key are all candidates",
			[]outcome{failed("a", invalid), failed("a", invalid)},
			[]string{"isolate", "isolate"},
		},
		{
			"unknown topic is retried, and holds its key",
			[]outcome{failed("a", unknown), ok("b"), failed("a", unknown)},
			[]string{"retry", "ok", "retry"},
		},
	} {
		order(tc.out)
		got := answers(tc.out)
		for i := range got {
			if got[i] != tc.want[i] {
				t.Errorf("%s: got %v, want %v", tc.name, got, tc.want)
				break
			}
		}
	}
}
