package app

import (
	"errors"
	"strings"
	"testing"
	"time"

	"github.com/twmb/franz-go/pkg/kerr"

	"github.com/outbox-relay/outbox-relay/internal/config"
	"github.com/outbox-relay/outbox-relay/internal/source"
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
	src := newRunningSource(cs, []Shard{{}})
	r := src.shards[0]
	check := func(name, state, cause, reason string) {
		t.Helper()
		c := src.condition(now, map[string]string{"kafka": "ok"})
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

// TestConditionOfBuckets: a source split into buckets is judged from its
// shards: standing by while other replicas hold every bucket, starting (or
// stuck) while one of its buckets is, naming it.
func TestConditionOfBuckets(t *testing.T) {
	cs := config.Source{Name: "orders", Sink: "kafka", Shards: 2,
		Readiness: config.Readiness{MaxClaimFailure: config.Duration(30 * time.Second)}}
	now := time.Now()
	r := newRunningSource(cs, []Shard{{Bucket: source.Bucket{Index: 0, Count: 2}}, {Bucket: source.Bucket{Index: 1, Count: 2}}})
	check := func(name, state, cause, reason string) {
		t.Helper()
		c := r.condition(now, map[string]string{"kafka": "ok"})
		if c.State != state || c.Cause != cause || !strings.Contains(c.Reason, reason) {
			t.Errorf("%s: %+v, want %s %s containing %q", name, c, state, cause, reason)
		}
	}
	check("just started", StateStarting, CauseLeaseUnheld, "bucket 0/2: acquiring the lease")
	r.shards[0].standby(nil)
	check("one bucket held elsewhere, the other acquiring", StateStarting, CauseLeaseUnheld, "bucket 1/2: acquiring the lease")
	r.shards[1].standby(nil)
	check("both held elsewhere", StateStandby, CauseLeaseElsewhere, "every bucket")
	r.shards[1].standby(errors.New("connection refused"))
	r.shards[1].mu.Lock()
	r.shards[1].since = now.Add(-time.Minute)
	r.shards[1].mu.Unlock()
	check("one bucket's lease cannot be had for a minute", StateStuck, CauseLeaseUnheld, "bucket 1/2: no relay holds it")
}

// TestWithLeases: a source's status takes the leases of the way it is split
// now: its own lease unsplit, else every bucket's (held only when all are,
// holders listed), and leaves out the leases of an earlier split.
func TestWithLeases(t *testing.T) {
	now := time.Now()
	row := func(lease, owner string, term int64, held bool) SourceStatus {
		return SourceStatus{Source: "orders", Pending: 7, lease: lease, Owner: owner, Term: term, Held: held, HeldSince: at(now)}
	}
	rows := []SourceStatus{row("orders", "old", 3, false), row("orders/0", "a", 2, true), row("orders/1", "b", 5, true),
		row("orders/2", "a", 1, false)}
	whole := withLeases(rows, 1)
	if whole.Owner != "old" || whole.Term != 3 || whole.Held || whole.Shards != nil || whole.Pending != 7 {
		t.Errorf("unsplit: %+v, want the source's own lease", whole)
	}
	two := withLeases(rows, 2)
	if two.Owner != "a, b" || two.Term != 5 || !two.Held || len(two.Shards) != 2 || two.Shards[1] != (ShardLease{"orders/1", "b", 5, true}) {
		t.Errorf("two buckets: %+v, want both buckets' leases, held", two)
	}
	four := withLeases(rows, 4)
	if four.Held || len(four.Shards) != 4 || four.Shards[3] != (ShardLease{Lease: "orders/3"}) {
		t.Errorf("four buckets: %+v, want not held: bucket 2's lease expired and bucket 3 has none", four)
	}
	cs := config.Source{Name: "orders", Shards: 4}
	if got := judgeRecord(four, cs, now); got.State != StateStuck || !strings.Contains(got.Reason, "orders/2") {
		t.Errorf("four buckets judged %s: %s, want stuck naming bucket orders/2", got.State, got.Reason)
	}
}
