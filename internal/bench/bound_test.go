package bench

import (
	"math"
	"testing"
)

// TestMachineBound: the bound is cores ÷ the CPU the relay, the database
// and the broker spent per event, and the ratio is taken against the lower
// of it and the ceiling.
func TestMachineBound(t *testing.T) {
	relay := Measure{EventsPerSec: 158583, CPUMsPer1k: 3.5, PostgresCPUMs1k: 4.9, BrokerCPUMs1k: 0.8}
	near := func(got, want float64) bool { return math.Abs(got-want) < 1e-6*math.Max(1, math.Abs(want)) }

	b := machineBound(2, Measure{EventsPerSec: 279961, PostgresCPUMs1k: 4.1}, relay)
	if !near(b.CPUPerEvent, 9.2) || !near(b.EventsPerSec, 2e6/9.2) {
		t.Errorf("bound = %+v, want 9.2 µs/event and %.0f events/s", b, 2e6/9.2)
	}
	if !near(b.Limit, 2e6/9.2) || !near(b.Ratio, 158583/(2e6/9.2)) {
		t.Errorf("limit %.0f ratio %.4f: the machine is the lower limit here", b.Limit, b.Ratio)
	}
	if b.DatabaseCPUCeiling != 4.1 || b.DatabaseCPURelay != 4.9 {
		t.Errorf("database CPU ceiling/relay = %v/%v, want 4.1/4.9", b.DatabaseCPUCeiling, b.DatabaseCPURelay)
	}

	b = machineBound(8, Measure{EventsPerSec: 100000, MariaDBCPUMs1k: 6}, Measure{EventsPerSec: 90000, CPUMsPer1k: 3, MariaDBCPUMs1k: 6})
	if !near(b.Limit, 100000) || !near(b.Ratio, 0.9) {
		t.Errorf("limit %.0f ratio %.4f: the ceiling is the lower limit here", b.Limit, b.Ratio)
	}

	if b := machineBound(2, Measure{}, Measure{}); b.Ratio != 0 || b.EventsPerSec != 0 {
		t.Errorf("nothing measured: %+v, want zeros", b)
	}
}
