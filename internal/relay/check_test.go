package relay

import (
	"errors"
	"strings"
	"testing"
	"time"
)

func TestCheckStuck(t *testing.T) {
	start := time.Date(2026, 1, 1, 0, 0, 0, 0, time.UTC)
	boom := errors.New("connection refused")
	for _, tc := range []struct {
		name      string
		lastClaim time.Duration // after start; <0: never
		failing   bool
		oldest    time.Duration
		at        time.Duration // after start
		want      string        // "" ready
	}{
		{"fresh", -1, false, 0, time.Second, ""},
		{"claims fail briefly", 10 * time.Second, true, 0, 30 * time.Second, ""},
		{"claims fail too long", 10 * time.Second, true, 0, 41 * time.Second, "claims failing for 31s (readiness.max_claim_failure 30s): connection refused"},
		{"never claimed, failing", -1, true, 0, 31 * time.Second, "claims failing for 31s"},
		{"backlog young enough", time.Minute, false, 4 * time.Minute, time.Minute, ""},
		{"backlog too old", time.Minute, false, 6 * time.Minute, time.Minute, "the oldest pending event is 6m0s old (readiness.max_oldest_pending 5m0s)"},
	} {
		w := &Worker{o: Options{MaxOldestPending: 5 * time.Minute, MaxClaimFailure: 30 * time.Second}}
		w.started = start
		if tc.lastClaim >= 0 {
			w.lastPoll.Store(start.Add(tc.lastClaim).UnixNano())
		}
		if tc.failing {
			err := boom
			w.lastErr.Store(&err)
		}
		w.setOldest(tc.oldest)
		err := w.Check(start.Add(tc.at))
		switch {
		case tc.want == "" && err != nil:
			t.Errorf("%s: not ready: %v", tc.name, err)
		case tc.want != "" && (err == nil || !strings.Contains(err.Error(), tc.want)):
			t.Errorf("%s: %v, want %q", tc.name, err, tc.want)
		}
	}
}

// TestConditionTakeoverAndFirstClaim: a worker whose exactly-once
// takeover fails is starting, with the cause, within its grace
// (max_claim_failure) and stuck after it; one that has not claimed at all
// is starting within the grace and stuck after it.
func TestConditionTakeoverAndFirstClaim(t *testing.T) {
	start := time.Date(2026, 1, 1, 0, 0, 0, 0, time.UTC)
	w := &Worker{o: Options{MaxClaimFailure: 30 * time.Second}, started: start}
	if c := w.Condition(start.Add(10 * time.Second)); !c.Starting || c.Err != nil {
		t.Errorf("no claim yet, within the grace: %+v", c)
	}
	if err := w.Check(start.Add(31 * time.Second)); err == nil || !strings.Contains(err.Error(), "no successful claim in the 31s since it started") {
		t.Errorf("no claim past the grace: %v", err)
	}
	boom := errors.New("UNKNOWN_TOPIC_OR_PARTITION")
	w.takeover.Store(&boom)
	c := w.Condition(start.Add(10 * time.Second))
	if !c.Starting || c.Cause != CauseTakeover || !errors.Is(c.Err, boom) {
		t.Errorf("takeover failing within the grace: %+v", c)
	}
	if err := w.Check(start.Add(10 * time.Second)); err != nil {
		t.Errorf("takeover failing within the grace is not ready: %v", err)
	}
	if err := w.Check(start.Add(31 * time.Second)); err == nil || !strings.Contains(err.Error(), "exactly-once takeover failing for 31s") {
		t.Errorf("takeover failing past the grace: %v", err)
	}
	w.takeover.Store(nil)
	w.lastPoll.Store(start.Add(40 * time.Second).UnixNano())
	if c := w.Condition(start.Add(41 * time.Second)); c.Starting || c.Err != nil {
		t.Errorf("claimed: %+v", c)
	}
}
