package layout

import (
	"reflect"
	"slices"
	"testing"
)

// TestMergeUntouched: a source whose table the relay never writes keeps its
// preset's columns and templates but none of its state nor the columns the
// relay would write, needs SELECT alone and updates no column; it needs no
// state of its own.
func TestMergeUntouched(t *testing.T) {
	for _, preset := range []string{"status", "published-flag", "prisma", "delete", ""} {
		over := Spec{XIDColumn: "tx"}
		names := append(slices.Clone(statusCols), "tx")
		if preset == "" {
			over = Spec{ID: "id", Payload: "payload", Topic: "{topic}", XIDColumn: "tx", RetryCount: "retry_count", Error: "error"}
			names = append(names, "error")
		} else if preset != "status" {
			names = append(append(slices.Clone(flagCols), prismaCols...), "topic", "key", "tx")
		}
		m, explicit, err := MergeUntouched(preset, over, "")
		if err != nil {
			t.Fatalf("%q: %v", preset, err)
		}
		l, err := Resolve(m, explicit, table, cols(names...))
		if err != nil {
			t.Fatalf("%q: %v", preset, err)
		}
		if l.Mode != ModeNone || l.Flag != "" || l.Status != "" || l.PublishedAt != "" || l.RetryCount != "" || l.Error != "" ||
			l.Errored.Name != "" || l.BatchID.Name != "" || l.XID != "tx" {
			t.Errorf("%q: %+v, want no state and xid column tx", preset, viewOf(l))
		}
		if got := l.NeededPrivileges(); !reflect.DeepEqual(got, []string{"SELECT"}) {
			t.Errorf("%q: needs %v, want SELECT alone", preset, got)
		}
		if got := l.UpdatedColumns(); len(got) != 0 {
			t.Errorf("%q: updates %v, want none", preset, got)
		}
	}
	m, explicit, err := MergeUntouched("status", Spec{XIDColumn: "tx"}, "")
	if err != nil {
		t.Fatal(err)
	}
	l, err := Resolve(m, explicit, table, cols(append(slices.Clone(statusCols), "tx")...))
	if err != nil {
		t.Fatal(err)
	}
	if l.MaxRetries != "max_retries" {
		t.Errorf("max_retries %q: the per-row budget, which the relay only reads, must stay", l.MaxRetries)
	}
}
