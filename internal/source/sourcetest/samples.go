package sourcetest

import (
	"testing"

	"github.com/outbox-relay/outbox-relay/internal/source"
)

// SampleKeeper is a relay schema's chart samples, as a dialect keeps them.
type SampleKeeper struct {
	Record func(xs []source.Sample) error
	Read   func() ([]source.Sample, error)
	// Age makes every sample of source older than source.SampleSpan.
	Age func(source string)
	// Stored counts the samples of source in the table.
	Stored func(source string) int
}

// Samples checks that samples written are read back by source and time,
// and that those older than source.SampleSpan are pruned by the next write.
func Samples(t *testing.T, k SampleKeeper) {
	t.Helper()
	must := func(err error) {
		t.Helper()
		if err != nil {
			t.Fatal(err)
		}
	}
	must(k.Record([]source.Sample{{Source: "old", Pending: 1}}))
	k.Age("old")
	must(k.Record([]source.Sample{{Source: "b", Pending: 3, OldestSeconds: 1.5, EventsPerSecond: 10},
		{Source: "a", Pending: 1}}))
	if n := k.Stored("old"); n != 0 {
		t.Errorf("%d samples older than %v kept after a write", n, source.SampleSpan)
	}
	must(k.Record([]source.Sample{{Source: "a", Pending: 2, EventsPerSecond: 0.5}}))
	got, err := k.Read()
	must(err)
	var brief []source.Sample
	for _, x := range got {
		if x.At.IsZero() {
			t.Errorf("sample %+v has no time", x)
		}
		brief = append(brief, source.Sample{Source: x.Source, Pending: x.Pending, OldestSeconds: x.OldestSeconds,
			EventsPerSecond: x.EventsPerSecond})
	}
	want := []source.Sample{{Source: "a", Pending: 1}, {Source: "a", Pending: 2, EventsPerSecond: 0.5},
		{Source: "b", Pending: 3, OldestSeconds: 1.5, EventsPerSecond: 10}}
	if len(brief) != len(want) {
		t.Fatalf("read %+v, want %+v (the old sample pruned)", brief, want)
	}
	for i := range want {
		if brief[i] != want[i] {
			t.Fatalf("read %+v, want %+v", brief, want)
		}
	}
}
