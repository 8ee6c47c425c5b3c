package app

import (
	"errors"
	"fmt"
	"maps"
	"slices"
	"time"

	"github.com/twmb/franz-go/pkg/kerr"

	"github.com/outbox-relay/outbox-relay/internal/config"
	"github.com/outbox-relay/outbox-relay/internal/metrics"
	"github.com/outbox-relay/outbox-relay/internal/relay"
)

// States of a source, as `status`, the console, readiness and the
// outbox_relay_source_state gauge name them.
const (
	// StateRelaying: a relay holds the source and claims its rows.
	StateRelaying = "relaying"
	// StateStarting: the source was taken up a moment ago and has not had
	// time to claim yet (its grace is readiness.max_claim_failure).
	StateStarting = "starting"
	// StateStandby: another replica holds the source's lease.
	StateStandby = "standby"
	// StateStuck: the source is not relayed; the cause says why.
	StateStuck = "stuck"
)

// Causes of a source not relaying (empty while it relays).
const (
	CauseTakeover       = relay.CauseTakeover // exactly-once takeover failing
	CauseTopicMissing   = "topic_missing"     // the exactly-once progress topic does not exist
	CauseClaims         = relay.CauseClaims   // claim queries failing
	CauseBacklog        = relay.CauseBacklog  // oldest pending event older than readiness.max_oldest_pending
	CauseNoClaim        = relay.CauseNoClaim  // no successful claim since the term began
	CauseCircuitOpen    = "circuit_open"      // a sink's circuit breaker is open
	CauseLeaseElsewhere = "lease_elsewhere"   // another replica holds the lease
	CauseLeaseUnheld    = "lease_unheld"      // nobody holds the lease (or it cannot be had)
	CauseNotRecorded    = "not_recorded"      // no relay has recorded the source
	CauseDatabaseDown   = "database_down"     // its database does not answer, or (a member) could not be taken up
)

// leasePhase is where this process stands with a source's lease.
type leasePhase int

const (
	leaseAcquiring leasePhase = iota // not tried yet, or just released
	leaseStandby                     // could not have it (another replica, or an error)
	leaseHeld                        // this process holds it
)

// standby records that the lease could not be had: err says why, nil when
// another replica holds it.
func (r *runningShard) standby(err error) {
	r.mu.Lock()
	defer r.mu.Unlock()
	if r.lease != leaseStandby || (r.leaseErr == nil) != (err == nil) {
		r.since = time.Now()
	}
	r.lease, r.leaseErr = leaseStandby, err
}

// holding records that this process has the lease from now.
func (r *runningShard) holding() {
	r.mu.Lock()
	defer r.mu.Unlock()
	r.lease, r.leaseErr, r.since = leaseHeld, nil, time.Now()
}

// released records that this process's term ended (the lease lost, or the
// worker stopped to recover): it acquires again.
func (r *runningShard) released() {
	r.mu.Lock()
	defer r.mu.Unlock()
	r.lease, r.leaseErr, r.since = leaseAcquiring, nil, time.Now()
}

// sourceCondition is how a source stands, as this process knows it.
type sourceCondition struct {
	State  string
	Cause  string
	Reason string
}

// condition judges the source at now from this process's own knowledge:
// stuck (database_down) while its database is out of service, starting
// while it stands in for a source of a database not yet taken up; else
// from its shards: the first stuck, else starting, names its bucket and
// says why; else the source relays when one of its shards relays here, and
// stands by when every one is held elsewhere. An unsplit source is its one
// shard.
func (r *runningSource) condition(now time.Time, sinkStates map[string]string) sourceCondition {
	if since, err := r.health.get(); err != nil {
		return databaseDown(r.cs.Database, err, now.Sub(since))
	}
	if r.placeholder {
		return sourceCondition{StateStarting, "", "its database is being taken up"}
	}
	if len(r.shards) == 0 {
		return sourceCondition{StateStarting, "", "not started yet"}
	}
	if len(r.shards) == 1 {
		return r.shards[0].condition(now, sinkStates)
	}
	rank := map[string]int{StateStuck: 3, StateStarting: 2, StateRelaying: 1, StateStandby: 0}
	var out sourceCondition
	for i, sh := range r.shards {
		c := sh.condition(now, sinkStates)
		if c.Reason != "" {
			c.Reason = "bucket " + sh.bucket.String() + ": " + c.Reason
		}
		if i == 0 || rank[c.State] > rank[out.State] {
			out = c
		}
	}
	if out.State == StateStandby {
		out.Reason = "other replicas hold every bucket's lease; standing by"
	}
	return out
}

// condition judges the shard at now from this process's own knowledge: its
// lease, its worker's claims and takeover, and the states of its sinks
// (sinkStates, by sink name).
func (r *runningShard) condition(now time.Time, sinkStates map[string]string) sourceCondition {
	r.mu.Lock()
	w, phase, since, leaseErr := r.worker, r.lease, r.since, r.leaseErr
	r.mu.Unlock()
	grace := r.cs.Readiness.MaxClaimFailure.D()
	young := grace <= 0 || now.Sub(since) <= grace
	startingOrStuck := func(cause, reason string) sourceCondition {
		if young {
			return sourceCondition{StateStarting, cause, reason}
		}
		return sourceCondition{StateStuck, cause, reason}
	}
	if w == nil {
		switch {
		case phase == leaseStandby && leaseErr == nil:
			return sourceCondition{StateStandby, CauseLeaseElsewhere, "another replica holds the lease; standing by"}
		case leaseErr != nil:
			return startingOrStuck(CauseLeaseUnheld, fmt.Sprintf("no relay holds it: the lease could not be had for %s: %v",
				now.Sub(since).Round(time.Second), leaseErr))
		case phase == leaseHeld:
			return startingOrStuck(CauseLeaseUnheld, "lease taken; the previous holder's claims are being ended")
		default:
			return startingOrStuck(CauseLeaseUnheld, "acquiring the lease")
		}
	}
	c := w.Condition(now)
	if c.Err != nil {
		cause := c.Cause
		if cause == relay.CauseTakeover && errors.Is(c.Err, kerr.UnknownTopicOrPartition) {
			cause = CauseTopicMissing
		}
		state := StateStuck
		if c.Starting {
			state = StateStarting
		}
		return sourceCondition{state, cause, c.Err.Error()}
	}
	if c.Starting {
		return sourceCondition{StateStarting, "", "no claim yet"}
	}
	for _, name := range sinkNames(r.cs) {
		if sinkStates[name] == "circuit open" {
			return sourceCondition{StateStuck, CauseCircuitOpen, "sink " + name + ": circuit open"}
		}
	}
	return sourceCondition{State: StateRelaying}
}

// databaseDown is the condition of a source whose database db has been
// out of service for d, err saying why.
func databaseDown(db string, err error, d time.Duration) sourceCondition {
	return sourceCondition{StateStuck, CauseDatabaseDown,
		fmt.Sprintf("database %s out of service for %s: %v", db, d.Round(time.Second), err)}
}

// sinkNames are the sinks the source publishes to.
func sinkNames(cs config.Source) []string {
	names := []string{cs.Sink}
	for _, rt := range cs.Routes {
		if rt.Sink != "" && !slices.Contains(names, rt.Sink) {
			names = append(names, rt.Sink)
		}
	}
	return names
}

// sinkStates are the states of this process's sinks (ok, failing,
// half-open, circuit open), by name.
func (a *App) sinkStates() map[string]string {
	a.mu.Lock()
	defer a.mu.Unlock()
	out := map[string]string{}
	for name, s := range a.sinks {
		if st, ok := s.(interface{ Status() string }); ok {
			out[name] = st.Status()
		} else {
			out[name] = "ok"
		}
	}
	return out
}

// conditions judges every source this process serves, by name.
func (a *App) conditions(now time.Time) map[string]sourceCondition {
	states := a.sinkStates()
	a.mu.Lock()
	running := maps.Clone(a.running)
	a.mu.Unlock()
	out := map[string]sourceCondition{}
	for name, r := range running {
		out[name] = r.condition(now, states)
	}
	return out
}

// sourceStates are the sources' states for the outbox_relay_source_state
// gauge.
func (a *App) sourceStates() []metrics.SourceState {
	var out []metrics.SourceState
	a.mu.Lock()
	running := maps.Clone(a.running)
	a.mu.Unlock()
	for name, c := range a.conditions(time.Now()) {
		st := metrics.SourceState{Source: name, State: c.State, Cause: c.Cause}
		if r := running[name]; r != nil && len(r.shards) > 1 {
			for _, sh := range r.shards {
				st.Shards = append(st.Shards, metrics.ShardHeld{Shard: sh.bucket.LeaseName(name), Held: sh.active() != nil})
			}
		}
		out = append(out, st)
	}
	return out
}
