package sourcetest

import (
	"context"
	"slices"
	"testing"
	"time"

	"github.com/outbox-relay/outbox-relay/internal/source"
)

// deadLetter claims the oldest pending row and dead-letters it with reason.
func deadLetter(t *testing.T, st Store, reason string) {
	t.Helper()
	b := claim(t, st, 1)
	if b == nil {
		t.Fatal("claim: nothing to dead-letter")
	}
	complete(t, b, source.Outcome{Dead: []source.Dead{{Index: 0, Attempts: 1, Reason: reason, PayloadIsJSON: true, Exhausted: true}}})
	// Dead letters made one after the other sort by their time.
	time.Sleep(10 * time.Millisecond)
}

// eventIDs lists the original event ids of dead letters.
func eventIDs(evs []source.FailedEvent) []string {
	out := make([]string, len(evs))
	for i, e := range evs {
		out[i] = e.OriginalEventID
	}
	return out
}

// testDeadLetterList: every filter of the dead-letter list selects what it
// names, oldest first or newest first, within the limit.
func (s *suite) testDeadLetterList(t *testing.T) {
	tbl, src := s.retainedTable(t)
	id := tbl.Insert(t, rows(3, 400)...)
	st := tbl.Open(t, Options{Source: src})
	deadLetter(t, st, "broker said: Request TIMED OUT")
	deadLetter(t, st, "payload too large")
	publishAll(t, claim(t, st, 1))

	all := tbl.ListFailed(t, source.DLQFilter{Source: src})
	if got := eventIDs(all); !slices.Equal(got, id[:2]) {
		t.Fatalf("dead letters of the source = %v, want %v, oldest first", got, id[:2])
	}
	e := all[0]
	if e.Source != src || e.Reason != "broker said: Request TIMED OUT" || e.FailureCount != 1 || e.ReplayedAt != nil ||
		e.ReplayCount != 0 || e.ID == "" || !jsonEqual(e.Payload, `{"n": 0}`) {
		t.Errorf("dead letter = %+v (payload %s)", e, e.Payload)
	}
	now := time.Now()
	for _, tc := range []struct {
		name string
		f    source.DLQFilter
		want []string
	}{
		{"another source", source.DLQFilter{Source: src + "_other"}, nil},
		{"reason, in any case", source.DLQFilter{Source: src, Reason: "timed out"}, id[:1]},
		{"limit", source.DLQFilter{Source: src, Limit: 1}, id[:1]},
		{"newest first", source.DLQFilter{Source: src, Newest: true}, []string{id[1], id[0]}},
		{"newest first, limit", source.DLQFilter{Source: src, Newest: true, Limit: 1}, id[1:2]},
		{"event ids", source.DLQFilter{Source: src, EventIDs: []string{id[1], id[2]}}, id[1:2]},
		{"dead-letter ids", source.DLQFilter{IDs: []string{all[1].ID}}, id[1:2]},
		{"since before", source.DLQFilter{Source: src, Since: now.Add(-time.Hour)}, id[:2]},
		{"since after", source.DLQFilter{Source: src, Since: now.Add(time.Hour)}, nil},
		{"event type", source.DLQFilter{Source: src, EventType: e.EventType}, id[:2]},
		{"another event type", source.DLQFilter{Source: src, EventType: "sourcetest.none"}, nil},
		{"reason with a LIKE wildcard", source.DLQFilter{Source: src, Reason: "%"}, nil},
	} {
		if got := eventIDs(tbl.ListFailed(t, tc.f)); !slices.Equal(got, tc.want) {
			t.Errorf("%s: dead letters %v, want %v", tc.name, got, tc.want)
		}
	}
}

// testReplay: a replay puts the row back in the pending set (restoring it
// where the layout deleted it), marks the dead letter replayed, records an
// audit row, and refuses another source's dead letters.
func (s *suite) testReplay(t *testing.T) {
	tbl, src := s.retainedTable(t)
	id := tbl.Insert(t, rows(2, 500)...)
	st := tbl.Open(t, Options{Source: src})
	deadLetter(t, st, "boom")
	deadLetter(t, st, "boom")
	dl := tbl.ListFailed(t, source.DLQFilter{Source: src})
	if len(dl) != 2 {
		t.Fatalf("dead letters = %v, want 2", eventIDs(dl))
	}
	ctx := context.Background()
	other := dl[0]
	other.Source = src + "_other"
	if n, err := st.Replay(ctx, []source.FailedEvent{other}, "sourcetest"); err == nil || n != 0 {
		t.Errorf("replay of another source's dead letter = %d, %v; want refused", n, err)
	}
	if n, err := st.Replay(ctx, dl[:1], "sourcetest"); err != nil || n != 1 {
		t.Fatalf("replay = %d, %v", n, err)
	}
	if r := tbl.State(t, id[0]); !r.Exists || !r.Pending || r.Published || r.Failed || r.Attempts != 0 || r.Error != "" {
		t.Errorf("replayed row %s: %+v, want back in the pending set with its counters reset", id[0], r)
	}
	if r := tbl.State(t, id[1]); r.Pending {
		t.Errorf("row %s not replayed is pending: %+v", id[1], r)
	}
	if got := eventIDs(tbl.ListFailed(t, source.DLQFilter{Source: src})); !slices.Equal(got, id[1:2]) {
		t.Errorf("open dead letters after the replay = %v, want %v", got, id[1:2])
	}
	all := tbl.ListFailed(t, source.DLQFilter{Source: src, IncludeReplayed: true})
	if len(all) != 2 || all[0].ReplayedAt == nil || all[0].ReplayCount != 1 || all[1].ReplayedAt != nil {
		t.Errorf("dead letters with the replayed = %+v, want the first replayed once", all)
	}
	if got := tbl.Audit(t, dl[0].ID); !slices.Equal(got, []string{"replay"}) {
		t.Errorf("audit of the replayed dead letter = %v, want [replay]", got)
	}
	if got := tbl.Audit(t, dl[1].ID); len(got) != 0 {
		t.Errorf("audit of the dead letter not replayed = %v, want none", got)
	}
	b := claim(t, st, 10)
	if got := ids(b); !slices.Equal(got, id[:1]) {
		t.Errorf("claimed after the replay %v, want %v", got, id[:1])
	}
	release(t, b)
}

// testPurgeDead: the dead-letter purge deletes the named dead letters not
// yet replayed, each with an audit row, and leaves the table's rows and the
// replayed dead letters as they are.
func (s *suite) testPurgeDead(t *testing.T) {
	tbl, src := s.retainedTable(t)
	id := tbl.Insert(t, rows(2, 600)...)
	st := tbl.Open(t, Options{Source: src})
	deadLetter(t, st, "boom")
	deadLetter(t, st, "boom")
	dl := tbl.ListFailed(t, source.DLQFilter{Source: src})
	if len(dl) != 2 {
		t.Fatalf("dead letters = %v, want 2", eventIDs(dl))
	}
	if n, err := st.Replay(context.Background(), dl[1:], "sourcetest"); err != nil || n != 1 {
		t.Fatalf("replay = %d, %v", n, err)
	}
	// Ids compare as text: "<id>x" (or another database's dead-letter id)
	// is no id, though a number conversion might read it as one.
	if n := tbl.PurgeDead(t, []string{dl[0].ID + "x", "999999", "00000000-0000-4000-8000-000000000000"}, "sourcetest"); n != 0 {
		t.Errorf("purge of unknown ids deleted %d, want 0", n)
	}
	before := tbl.State(t, id[0])
	if n := tbl.PurgeDead(t, []string{dl[0].ID, dl[1].ID}, "sourcetest"); n != 1 {
		t.Errorf("purged %d dead letters, want 1 (the one not replayed)", n)
	}
	if got := eventIDs(tbl.ListFailed(t, source.DLQFilter{Source: src, IncludeReplayed: true})); !slices.Equal(got, id[1:2]) {
		t.Errorf("dead letters after the purge = %v, want the replayed one %v", got, id[1:2])
	}
	if got := tbl.Audit(t, dl[0].ID); !slices.Equal(got, []string{"purge"}) {
		t.Errorf("audit of the purged dead letter = %v, want [purge]", got)
	}
	if got := tbl.Audit(t, dl[1].ID); !slices.Equal(got, []string{"replay"}) {
		t.Errorf("audit of the replayed dead letter = %v, want [replay]", got)
	}
	after := tbl.State(t, id[0])
	switch {
	case s.caps.TableUntouched:
		// The table holds no mark of its own: the dead letter was the
		// record of the failure. The row is not pending again.
		if !after.Exists || after.Pending {
			t.Errorf("row of the purged dead letter: %+v, want there and not pending", after)
		}
	case after != before:
		t.Errorf("row of the purged dead letter: %+v, was %+v", after, before)
	}
	if n := tbl.PurgeDead(t, []string{dl[0].ID}, "sourcetest"); n != 0 {
		t.Errorf("second purge deleted %d, want 0", n)
	}
}
