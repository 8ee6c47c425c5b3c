package bench

import (
	"context"
	"strings"
	"testing"

	"github.com/outbox-relay/outbox-relay/internal/config"
	"github.com/outbox-relay/outbox-relay/internal/pgtest"
)

// A small drain by capture cursor: the relay publishes every row, the
// ceiling beside it is the claim+UPDATE loop of the same table, and the
// cursor left no dead tuple.
func TestDrainCursor(t *testing.T) {
	if testing.Short() {
		t.Skip("needs PostgreSQL")
	}
	o := Options{DSN: pgtest.AdminDSN(), Workload: "drain", Capture: config.CaptureCursor, Rows: 3000, Keys: 50, PayloadBytes: 200,
		BatchSize: 500, Pipeline: 2, Layouts: []string{"delete", "mark"}, Orderings: []bool{true}, Partitions: 4, InProcessBroker: true}
	rep, err := Run(context.Background(), o)
	if err != nil {
		t.Fatal(err)
	}
	if len(rep.Drain) != 1 {
		t.Fatalf("%d results, want the one of layout mark's table", len(rep.Drain))
	}
	r := rep.Drain[0]
	if r.Capture != config.CaptureCursor || r.Layout != "mark" || r.Relay.Events != o.Rows || r.Ceiling.Events != o.Rows {
		t.Errorf("result %+v: want capture cursor on layout mark, relay and ceiling %d events", r, o.Rows)
	}
	if r.Relay.DeadTuplesAfter != 0 {
		t.Errorf("%d dead tuples after a drain by capture cursor, which writes nothing to the table", r.Relay.DeadTuplesAfter)
	}
	var out strings.Builder
	Print(&out, rep)
	if !strings.Contains(out.String(), "mark, capture cursor") || !strings.Contains(out.String(), "claim+UPDATE ceiling") {
		t.Errorf("the report does not say the drain was by capture cursor beside the claim+UPDATE ceiling:\n%s", out.String())
	}
}

func TestCaptureOptions(t *testing.T) {
	for _, tc := range []struct {
		o    Options
		want string
	}{
		{Options{Workload: "drain", Capture: "wal"}, `unknown capture "wal"`},
		{Options{Workload: "steady", Capture: config.CaptureCursor}, "applies to the drain workload on PostgreSQL"},
		{Options{Workload: "drain", Capture: config.CaptureCursor, Presets: []string{"status"}}, "not with --preset"},
		{Options{Workload: "drain", Capture: config.CaptureCursor, Layouts: []string{"queue"}}, "drains layout mark's table"},
	} {
		if err := tc.o.checkCapture(); err == nil || !strings.Contains(err.Error(), tc.want) {
			t.Errorf("%+v: %v, want an error containing %q", tc.o, err, tc.want)
		}
	}
}
