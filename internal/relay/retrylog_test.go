package relay

import (
	"bytes"
	"log/slog"
	"strings"
	"testing"
	"time"

	"github.com/outbox-relay/outbox-relay/internal/source"
)

// TestRetryLog: a row given another attempt is logged at info level at
// once with its reason; the retries that follow within the minute make
// one summary when the minute is over (how many, the last reason), not a
// line each; after a quiet minute the next failure is logged at once again.
func TestRetryLog(t *testing.T) {
	var buf bytes.Buffer
	log := slog.New(slog.NewTextHandler(&buf, &slog.HandlerOptions{Level: slog.LevelInfo}))
	now := time.Date(2026, 1, 1, 0, 0, 0, 0, time.UTC)
	r := newRetryLog(log.With("source", "shop"), time.Minute, func() time.Time { return now })
	lines := func() []string {
		s := strings.TrimSpace(buf.String())
		buf.Reset()
		if s == "" {
			return nil
		}
		return strings.Split(s, "\n")
	}
	rows := []source.Row{{ID: "e1"}, {ID: "e2"}, {ID: "e3"}}
	r.noteOutcome(rows, source.Outcome{Published: []int{2}, Retry: []source.Retry{
		{Index: 0, Attempts: 1, Err: "broker said no"},
		{Index: 1, Attempts: 0, Err: "held: an earlier row of its key is pending"},
	}})
	got := lines()
	if len(got) != 1 || !strings.Contains(got[0], "level=INFO") || !strings.Contains(got[0], "source=shop") ||
		!strings.Contains(got[0], "event_id=e1") || !strings.Contains(got[0], `reason="broker said no"`) {
		t.Fatalf("first failure: %q", got)
	}
	for i := range 5 {
		now = now.Add(10 * time.Second)
		r.noteOutcome(rows, source.Outcome{Retry: []source.Retry{{Index: 0, Attempts: 2 + i, Err: "timeout " + string(rune('a'+i))}}})
	}
	if got := lines(); len(got) != 0 {
		t.Fatalf("retries within the minute are logged one by one: %q", got)
	}
	r.tick() // 50 s after the first line: not yet
	if got := lines(); len(got) != 0 {
		t.Fatalf("summary before the minute is over: %q", got)
	}
	now = now.Add(10 * time.Second)
	r.tick()
	got = lines()
	if len(got) != 1 || !strings.Contains(got[0], "level=INFO") || !strings.Contains(got[0], "retries=5") ||
		!strings.Contains(got[0], `last_reason="timeout e"`) || !strings.Contains(got[0], "last_event_id=e1") {
		t.Fatalf("summary: %q", got)
	}
	now = now.Add(2 * time.Minute)
	r.tick()
	if got := lines(); len(got) != 0 {
		t.Fatalf("a summary of no retries: %q", got)
	}
	r.noteOutcome(rows, source.Outcome{Retry: []source.Retry{{Index: 1, Attempts: 1, Err: "again"}}})
	if got := lines(); len(got) != 1 || !strings.Contains(got[0], "event_id=e2") || !strings.Contains(got[0], "reason=again") {
		t.Fatalf("a failure after a quiet minute: %q", got)
	}
}
