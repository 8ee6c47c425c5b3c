package bench

import "runtime"

// MachineBound is the rate this machine could carry if the relay, the
// database and the broker shared its cores with nothing else and no core
// ever waited: cores ÷ the CPU all three spent per event in the relay
// phase. The lower of it and the database's ceiling is what the relay can
// at best reach; Ratio is the relay's rate over that.
type MachineBound struct {
	Cores        int     `json:"cores"`
	CPUPerEvent  float64 `json:"cpu_us_per_event"` // relay + database + broker, µs
	EventsPerSec float64 `json:"events_per_sec"`
	// Limit is the lower of EventsPerSec and the ceiling, and Ratio the
	// relay's rate over it.
	Limit float64 `json:"limit_events_per_sec"`
	Ratio float64 `json:"ratio"`
	// DatabaseCPUCeiling and DatabaseCPURelay are the database's CPU per
	// event (µs) in the ceiling loop and under the relay: the relay's
	// statements should cost the database no more than the loop's.
	DatabaseCPUCeiling float64 `json:"database_cpu_us_per_event_ceiling"`
	DatabaseCPURelay   float64 `json:"database_cpu_us_per_event_relay"`
}

// dbCPU is the database server's CPU per event of m, in µs.
func (m Measure) dbCPU() float64 { return m.PostgresCPUMs1k + m.MariaDBCPUMs1k }

// machineBound computes the bound of a relay phase against its ceiling on
// a machine of cores cores.
func machineBound(cores int, ceiling, relay Measure) MachineBound {
	b := MachineBound{Cores: cores, DatabaseCPUCeiling: ceiling.dbCPU(), DatabaseCPURelay: relay.dbCPU()}
	b.CPUPerEvent = relay.CPUMsPer1k + relay.dbCPU() + relay.BrokerCPUMs1k
	if b.CPUPerEvent > 0 {
		b.EventsPerSec = float64(cores) * 1e6 / b.CPUPerEvent
	}
	b.Limit = b.EventsPerSec
	if ceiling.EventsPerSec > 0 && (b.Limit == 0 || ceiling.EventsPerSec < b.Limit) {
		b.Limit = ceiling.EventsPerSec
	}
	if b.Limit > 0 {
		b.Ratio = relay.EventsPerSec / b.Limit
	}
	return b
}

// cores is how many cores the machine has.
func cores() int { return runtime.NumCPU() }
