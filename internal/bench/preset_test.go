package bench

import (
	"context"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/outbox-relay/outbox-relay/internal/layout"
	"github.com/outbox-relay/outbox-relay/internal/mytest"
	"github.com/outbox-relay/outbox-relay/internal/pgtest"
)

// Every preset of the relay has a table to drain; the mysql driver has
// all of them but the payment queue, and refuses that one by name.
func TestDrainSpecs(t *testing.T) {
	for _, p := range layout.PresetNames() {
		if sp := presetSpecs[p]; sp == nil || sp.pg == nil {
			t.Errorf("preset %s: no PostgreSQL table", p)
		}
	}
	all, err := drainSpecs(Options{Driver: "mysql", Presets: []string{"all"}})
	if err != nil {
		t.Fatal(err)
	}
	var names []string
	for _, sp := range all {
		names = append(names, sp.name)
	}
	if want := slices.DeleteFunc(layout.PresetNames(), func(p string) bool { return p == "payment-queue" }); !slices.Equal(names, want) {
		t.Errorf("all on mysql = %v, want %v", names, want)
	}
	if _, err := drainSpecs(Options{Driver: "mysql", Presets: []string{"status", "payment-queue"}}); err == nil || !strings.Contains(err.Error(), "payment-queue") {
		t.Errorf("payment-queue on mysql: %v", err)
	}
	if _, err := drainSpecs(Options{Presets: []string{"outbox-pattern"}}); err == nil {
		t.Error("an unknown preset: no error")
	}
	if _, err := Run(context.Background(), Options{Workload: "steady", Presets: []string{"status"}}); err == nil {
		t.Error("--preset with steady: no error")
	}
}

// drainEveryPreset drains each preset's table of 2,000 rows, analyzed and
// (noAnalyze) first never analyzed: every row is relayed and the ceiling
// loop takes every row. Rates are never asserted.
func drainEveryPreset(t *testing.T, base Options, noAnalyze bool) {
	specs, err := drainSpecs(base)
	if err != nil {
		t.Fatal(err)
	}
	for _, sp := range specs {
		t.Run(sp.name, func(t *testing.T) {
			o := base
			o.Presets, o.NoAnalyze = []string{sp.name}, noAnalyze
			rep, err := Run(context.Background(), o)
			if err != nil {
				t.Fatal(err)
			}
			if len(rep.Drain) != 1 {
				t.Fatalf("%d results, want 1", len(rep.Drain))
			}
			r := rep.Drain[0]
			if r.Preset != sp.name || r.Relay.Events != o.Rows || r.Ceiling.Events != o.Rows || r.Relay.CutShort || r.Ceiling.CutShort {
				t.Errorf("preset %q: relay %d, ceiling %d events (cut short: %v, %v), want %s, %d", r.Preset, r.Relay.Events, r.Ceiling.Events,
					r.Relay.CutShort, r.Ceiling.CutShort, sp.name, o.Rows)
			}
			if noAnalyze != (r.NoAnalyze != nil) {
				t.Fatalf("no-analyze %v: relay_no_analyze %v", noAnalyze, r.NoAnalyze)
			}
			if noAnalyze && (r.NoAnalyze.Events != o.Rows || r.NoAnalyze.CutShort || r.NoAnalyzeRatio == 0) {
				t.Errorf("not analyzed: %d events (cut short: %v), ratio %v; want %d", r.NoAnalyze.Events, r.NoAnalyze.CutShort, r.NoAnalyzeRatio, o.Rows)
			}
			var out strings.Builder
			Print(&out, rep)
			if !strings.Contains(out.String(), "preset "+sp.name) || noAnalyze != strings.Contains(out.String(), "not/analyzed") {
				t.Errorf("the table does not show the preset and its figures:\n%s", out.String())
			}
		})
	}
}

func presetOptions() Options {
	return Options{
		Workload: "drain", Presets: []string{"all"}, Rows: 2000, Keys: 50, PayloadBytes: 200, BatchSize: 500, Pipeline: 2,
		Orderings: []bool{true}, Partitions: 4, InProcessBroker: true, MaxTime: 10 * time.Minute,
	}
}

func TestPresetsDrain(t *testing.T) {
	if testing.Short() {
		t.Skip("needs PostgreSQL")
	}
	o := presetOptions()
	o.DSN = pgtest.AdminDSN()
	// With --no-analyze each preset's table is drained twice: never
	// analyzed, then analyzed.
	drainEveryPreset(t, o, true)
}

func TestPresetsDrainMySQL(t *testing.T) {
	if testing.Short() {
		t.Skip("needs MariaDB")
	}
	mytest.Admin(t)
	o := presetOptions()
	o.Driver, o.MySQLDSN = "mysql", mytest.AdminDSN()
	// With --no-analyze each preset's table is drained twice: never
	// analyzed, then analyzed.
	drainEveryPreset(t, o, true)
}

// A time limit too short for any drain ends each measurement, reported
// as cut short, and the run goes on to the end.
func TestDrainCutShort(t *testing.T) {
	if testing.Short() {
		t.Skip("needs PostgreSQL")
	}
	o := presetOptions()
	o.DSN, o.Presets, o.NoAnalyze, o.MaxTime = pgtest.AdminDSN(), []string{"kafka-outbox"}, true, time.Millisecond
	rep, err := Run(context.Background(), o)
	if err != nil {
		t.Fatal(err)
	}
	r := rep.Drain[0]
	if !r.Relay.CutShort || !r.Ceiling.CutShort || r.NoAnalyze == nil || !r.NoAnalyze.CutShort {
		t.Errorf("cut short: relay %v (%d events), ceiling %v, not analyzed %+v", r.Relay.CutShort, r.Relay.Events, r.Ceiling.CutShort, r.NoAnalyze)
	}
	var out strings.Builder
	Print(&out, rep)
	if !strings.Contains(out.String(), "* cut short") {
		t.Errorf("the table does not say the drains were cut short:\n%s", out.String())
	}
}
