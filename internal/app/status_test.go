package app

import (
	"errors"
	"strings"
	"testing"
	"time"

	"github.com/twmb/franz-go/pkg/kerr"

	"github.com/outbox-relay/outbox-relay/internal/config"
)

func at(t time.Time) *time.Time { return &t }

// TestJudgeRecord: from the relays' records, a source whose holder took
// the lease a moment ago and has not recorded a claim is starting (not
// stuck), with its holder's reason when it recorded one; stuck once the
// grace is over, with the cause; and a backlog the holder did not record
// (another process's, or too old) is stale, with its age.
func TestJudgeRecord(t *testing.T) {
	now := time.Date(2026, 1, 1, 12, 0, 0, 0, time.UTC)
	cs := config.Source{Name: "orders", Readiness: config.Readiness{MaxClaimFailure: config.Duration(30 * time.Second),
		MaxOldestPending: config.Duration(5 * time.Minute)}}
	takeover := map[string]string{"kafka": takeoverFailing + `exactly-once: progress topic "p" does not exist: ` + kerr.UnknownTopicOrPartition.Error()}
	for _, tc := range []struct {
		name               string
		s                  SourceStatus
		state, cause, want string
		stale              bool
	}{
		{"the previous process's record, the holder just started",
			SourceStatus{Held: true, Owner: "new", RecordedBy: "old", HeldSince: at(now.Add(-5 * time.Second)),
				LastClaim: at(now.Add(-10 * time.Minute)), Updated: at(now.Add(-10 * time.Minute)), Sinks: map[string]string{"kafka": "ok"}},
			StateStarting, "", "new took the lease 5s ago and has recorded no successful claim yet", true},
		{"the holder's record, no claim yet",
			SourceStatus{Held: true, Owner: "new", RecordedBy: "new", HeldSince: at(now.Add(-5 * time.Second)),
				Updated: at(now.Add(-time.Second)), Sinks: map[string]string{"kafka": "ok"}},
			StateStarting, "", "no successful claim yet", false},
		{"the holder's takeover failing, within the grace",
			SourceStatus{Held: true, Owner: "new", RecordedBy: "new", HeldSince: at(now.Add(-20 * time.Second)),
				Updated: at(now.Add(-time.Second)), Sinks: takeover},
			StateStarting, CauseTopicMissing, "sink kafka: exactly-once takeover failing", false},
		{"the holder's takeover failing, past the grace",
			SourceStatus{Held: true, Owner: "new", RecordedBy: "new", HeldSince: at(now.Add(-2 * time.Minute)),
				Updated: at(now.Add(-time.Second)), Sinks: takeover},
			StateStuck, CauseTopicMissing, "new took the lease 2m0s ago and has recorded no successful claim yet; sink kafka: exactly-once takeover failing", false},
		{"a holder that never recorded, past the grace",
			SourceStatus{Held: true, Owner: "new", RecordedBy: "old", HeldSince: at(now.Add(-2 * time.Minute)),
				Updated: at(now.Add(-10 * time.Minute)), Sinks: takeover},
			StateStuck, CauseNoClaim, "new took the lease 2m0s ago", true},
		{"relaying",
			SourceStatus{Held: true, Owner: "new", RecordedBy: "new", HeldSince: at(now.Add(-time.Hour)),
				LastClaim: at(now.Add(-time.Second)), Updated: at(now.Add(-time.Second)), Sinks: map[string]string{"kafka": "ok"}},
			StateRelaying, "", "", false},
		{"relaying, the record not refreshed for a minute",
			SourceStatus{Held: true, Owner: "new", RecordedBy: "new", HeldSince: at(now.Add(-time.Hour)),
				LastClaim: at(now.Add(-time.Minute)), Updated: at(now.Add(-time.Minute)), Sinks: map[string]string{"kafka": "ok"}},
			StateRelaying, "", "", true},
		{"claims stopped",
			SourceStatus{Held: true, Owner: "new", RecordedBy: "new", HeldSince: at(now.Add(-time.Hour)),
				LastClaim: at(now.Add(-2 * time.Minute)), Updated: at(now.Add(-time.Second)), Sinks: map[string]string{"kafka": "ok"}},
			StateStuck, CauseClaims, "no successful claim for 2m0s", false},
		{"circuit open",
			SourceStatus{Held: true, Owner: "new", RecordedBy: "new", HeldSince: at(now.Add(-time.Hour)),
				LastClaim: at(now.Add(-time.Second)), Updated: at(now.Add(-time.Second)), Sinks: map[string]string{"kafka": "circuit open"}},
			StateStuck, CauseCircuitOpen, "sink kafka: circuit open", false},
		{"nobody holds it",
			SourceStatus{Held: false, Owner: "old", RecordedBy: "old", LastClaim: at(now.Add(-time.Second)), Updated: at(now.Add(-time.Second))},
			StateStuck, CauseLeaseUnheld, "no relay holds it", true},
	} {
		got := judgeRecord(tc.s, cs, now)
		if got.State != tc.state || got.Cause != tc.cause || !strings.Contains(got.Reason, tc.want) {
			t.Errorf("%s: %q %q %q, want %q %q containing %q", tc.name, got.State, got.Cause, got.Reason, tc.state, tc.cause, tc.want)
		}
		if (got.Stuck != "") != (tc.state == StateStuck) {
			t.Errorf("%s: stuck %q in state %s", tc.name, got.Stuck, got.State)
		}
		if got.PendingStale != tc.stale {
			t.Errorf("%s: pending stale %t, want %t", tc.name, got.PendingStale, tc.stale)
		}
		if tc.s.Updated != nil && got.PendingAgeSeconds != now.Sub(*tc.s.Updated).Seconds() {
			t.Errorf("%s: pending age %vs", tc.name, got.PendingAgeSeconds)
		}
	}
}

// TestCondition: what this process knows of a source it serves: standing
// by while another replica holds the lease, starting while it acquires or
// has not claimed yet, stuck with the cause once the grace is over.
func TestCondition(t *testing.T) {
	cs := config.Source{Name: "orders", Sink: "kafka", Routes: []config.Route{{Sink: "audit"}},
		Readiness: config.Readiness{MaxClaimFailure: config.Duration(30 * time.Second)}}
	now := time.Now()
	r := newRunningSource(cs)
	check := func(name, state, cause, reason string) {
		t.Helper()
		c := r.condition(now, map[string]string{"kafka": "ok"})
		if c.State != state || c.Cause != cause || !strings.Contains(c.Reason, reason) {
			t.Errorf("%s: %+v, want %s %s containing %q", name, c, state, cause, reason)
		}
	}
	check("just started", StateStarting, CauseLeaseUnheld, "acquiring the lease")
	r.standby(nil)
	check("another replica holds it", StateStandby, CauseLeaseElsewhere, "another replica")
	r.standby(errors.New("connection refused"))
	check("the lease cannot be had", StateStarting, CauseLeaseUnheld, "connection refused")
	r.mu.Lock()
	r.since = now.Add(-time.Minute)
	r.mu.Unlock()
	check("the lease cannot be had for a minute", StateStuck, CauseLeaseUnheld, "no relay holds it")

	r.holding()
	check("lease taken, the worker not built yet", StateStarting, CauseLeaseUnheld, "previous holder's claims")
	r.released()
	check("the term ended", StateStarting, CauseLeaseUnheld, "acquiring the lease")
}
