package app

import (
	"context"
	"fmt"
	"maps"
	"slices"
	"strings"
	"time"

	"github.com/twmb/franz-go/pkg/kerr"

	"github.com/outbox-relay/outbox-relay/internal/config"
	"github.com/outbox-relay/outbox-relay/internal/lease"
	"github.com/outbox-relay/outbox-relay/internal/source"
	"github.com/outbox-relay/outbox-relay/internal/source/driver"
)

// SourceStatus is what `outbox-relay status` reports of one source, read
// from the relay's own tables (so any process with the configuration can
// ask, whichever replica relays the source).
type SourceStatus struct {
	Source   string `json:"source"`
	Database string `json:"database"`
	Table    string `json:"table"`
	// Owner is the process holding the source's lease and Term its term;
	// Held is false once the lease has expired.
	Owner string `json:"owner"`
	Term  int64  `json:"term"`
	Held  bool   `json:"held"`
	// Pending and OldestPendingSeconds are the backlog as last recorded.
	Pending              int64   `json:"pending"`
	OldestPendingSeconds float64 `json:"oldest_pending_seconds"`
	// EventsPerSecond is the delivery rate over the last minute.
	EventsPerSecond float64 `json:"events_per_second"`
	// Retrying counts events backing off; DeadLetters those dead-lettered
	// and not replayed.
	Retrying    int64 `json:"retrying"`
	DeadLetters int64 `json:"dead_letters"`
	// LastClaim is the latest successful claim (nil: none recorded);
	// Updated when the relay last recorded all this.
	LastClaim *time.Time        `json:"last_claim,omitempty"`
	Updated   *time.Time        `json:"updated,omitempty"`
	Sinks     map[string]string `json:"sinks"`
	// State is relaying, starting, standby or stuck (see the State
	// constants); Cause, when the source is not relayed, says why in a
	// word (see the Cause constants) and Reason in words.
	State  string `json:"state"`
	Cause  string `json:"cause,omitempty"`
	Reason string `json:"reason,omitempty"`
	// Stuck says why the source is stuck; empty when it is not.
	Stuck string `json:"stuck,omitempty"`
	// RecordedBy is the process whose record the figures come from, and
	// HeldSince when the lease's holder took it.
	RecordedBy string     `json:"recorded_by,omitempty"`
	HeldSince  *time.Time `json:"held_since,omitempty"`
	// PendingLive is set when Pending and OldestPendingSeconds were
	// counted by the process answering, which relays the source; else
	// they come from the stored record, PendingAgeSeconds old, and
	// PendingStale says that record is not the current holder's latest
	// (another process wrote it, or it is older than a few stats
	// intervals).
	PendingLive       bool    `json:"pending_live"`
	PendingStale      bool    `json:"pending_stale"`
	PendingAgeSeconds float64 `json:"pending_age_seconds"`
	// Shards, for a source split into buckets (sources[].shards), are the
	// leases of its buckets; Held is then true while every one is held,
	// Owner lists their holders, Term is the highest term and HeldSince
	// the latest hand-over.
	Shards []ShardLease `json:"shards,omitempty"`

	lease  string   // the lease a stored record's row is of (source.Recorded.Lease)
	owners []string // the holders of the source's leases
}

// ShardLease is the lease of one bucket of a split source.
type ShardLease struct {
	Lease string `json:"lease"`
	Owner string `json:"owner"`
	Term  int64  `json:"term"`
	Held  bool   `json:"held"`
}

// Status reads the state of every source of the configuration, as the
// relays recorded it, and judges whether each is stuck. A source of a
// database of a multi-database entry that is out of service (it cannot be
// reached, or has not been taken up) is stuck with cause database_down.
func (a *App) Status(ctx context.Context) ([]SourceStatus, error) {
	var out []SourceStatus
	now := time.Now()
	down := map[string]sourceCondition{}
	for _, m := range a.membersOf("") {
		if since, err := a.healthNow(m.Name); err != nil {
			down[m.Name] = databaseDown(m.Name, err, now.Sub(since))
		} else if !a.HasDatabase(m.Name) {
			down[m.Name] = sourceCondition{StateStarting, CauseDatabaseDown, "database " + m.Name + " not connected yet"}
		}
	}
	for _, db := range a.databaseNames() {
		if _, ok := down[db]; ok {
			continue
		}
		_, _, member := config.SplitMemberName(db)
		r, err := capability[driver.StatusReader](a, db, "read the relays' status")
		if err != nil {
			return nil, err
		}
		got, err := r.Status(ctx)
		if err != nil && member && ctx.Err() == nil {
			down[db] = databaseDown(db, fmt.Errorf("read status: %w", err), 0)
			continue
		} else if err != nil {
			return nil, fmt.Errorf("%s: read status: %w", dbPath(db), err)
		}
		for _, g := range got {
			if member && !a.belongs(db, g.Source) {
				continue // another member's, in a relay database they share (MySQL)
			}
			s := SourceStatus{Source: g.Source, Database: db, Table: g.Table, Owner: g.Owner, Term: g.Term, Held: g.Held,
				Pending: g.Pending, OldestPendingSeconds: g.OldestPendingSeconds, EventsPerSecond: g.EventsPerSecond,
				Retrying: g.Retrying, DeadLetters: g.DeadLetters, LastClaim: g.LastClaim, Updated: g.Updated, Sinks: g.Sinks,
				RecordedBy: g.RecordedBy, HeldSince: g.HeldSince, lease: g.Lease}
			if g.Schema != "" {
				s.Table = g.Schema + "." + g.Table
			}
			out = append(out, s)
		}
	}
	return a.judge(out, down, now), nil
}

// judge keeps the sources of this configuration (a discovered source is
// "rule:schema.table"; a source of a multi-database entry runs on each of
// its databases as "source@entry/database"), adds those no relay has
// recorded yet and those whose database is down (by name), and says how
// each stands by its record.
func (a *App) judge(recorded []SourceStatus, down map[string]sourceCondition, now time.Time) []SourceStatus {
	var out []SourceStatus
	// A source's rows (one a lease) follow each other.
	var groups [][]SourceStatus
	for i := 0; i < len(recorded); {
		j := i + 1
		for j < len(recorded) && recorded[j].Source == recorded[i].Source && recorded[j].Database == recorded[i].Database {
			j++
		}
		groups = append(groups, recorded[i:j])
		i = j
	}
	for i, cs := range a.cfg.Sources {
		for _, p := range a.placed(i, cs) {
			name, db := p.Source.Name, p.Source.Database
			if c, ok := down[db]; ok {
				s := SourceStatus{Source: name, Database: db, Table: p.Source.Table, Sinks: map[string]string{},
					State: c.State, Cause: c.Cause, Reason: c.Reason, PendingStale: true}
				if c.State == StateStuck {
					s.Stuck = c.Reason
				}
				out = append(out, s)
				continue
			}
			found := false
			for _, rows := range groups {
				if s := rows[0].Source; s != name && !strings.HasPrefix(s, name+":") {
					continue
				}
				found = true
				out = append(out, judgeRecord(withLeases(rows, cs.Shards), cs, now))
			}
			if !found {
				out = append(out, SourceStatus{Source: name, Database: db, Table: p.Source.Table,
					Sinks: map[string]string{}, State: StateStuck, Cause: CauseNotRecorded,
					Reason: "no relay has recorded it yet", Stuck: "no relay has recorded it yet", PendingStale: true})
			}
		}
	}
	return out
}

// placed lists where source i of the configuration runs: on its database,
// or on every database of its multi-database entry this process knows.
func (a *App) placed(i int, cs config.Source) []config.Placed {
	var names []string
	for _, m := range a.membersOf(cs.Database) {
		names = append(names, m.Name)
	}
	return a.placedOn(i, cs, names)
}

// placedOn lists where source i of the configuration runs: on its
// database, or, for a source of a multi-database entry, on each of the
// databases named that is a member of it (as package config places it).
func (a *App) placedOn(i int, cs config.Source, names []string) []config.Placed {
	db, ok := a.cfg.Databases[cs.Database]
	if !ok || !db.Multi() {
		return []config.Placed{{Index: i, Source: cs}}
	}
	var out []config.Placed
	for _, name := range names {
		for _, p := range a.cfg.SourcesOn(name) {
			if p.Index == i && p.Source.Database == name {
				out = append(out, p)
			}
		}
	}
	return out
}

// withLeases is the status of a source from its rows, one a lease, as the
// source is split now (shards): its own lease's, or its buckets'. Leases of
// an earlier split are left out.
func withLeases(rows []SourceStatus, shards int) SourceStatus {
	s := rows[0]
	s.Owner, s.Term, s.Held, s.HeldSince, s.lease = "", 0, false, nil, ""
	lease := func(name string) (SourceStatus, bool) {
		for _, r := range rows {
			if r.lease == name {
				return r, true
			}
		}
		return SourceStatus{}, false
	}
	if shards <= 1 {
		if r, ok := lease(s.Source); ok {
			s.Owner, s.Term, s.Held, s.HeldSince = r.Owner, r.Term, r.Held, r.HeldSince
			s.owners = []string{r.Owner}
		}
		return s
	}
	s.Held = true
	for i := range shards {
		name := source.Bucket{Index: i, Count: shards}.LeaseName(s.Source)
		r, ok := lease(name)
		s.Shards = append(s.Shards, ShardLease{Lease: name, Owner: r.Owner, Term: r.Term, Held: r.Held})
		s.Held = s.Held && ok && r.Held
		s.Term = max(s.Term, r.Term)
		if r.Owner != "" && !slices.Contains(s.owners, r.Owner) {
			s.owners = append(s.owners, r.Owner)
		}
		if r.HeldSince != nil && (s.HeldSince == nil || r.HeldSince.After(*s.HeldSince)) {
			s.HeldSince = r.HeldSince
		}
	}
	slices.Sort(s.owners)
	s.Owner = strings.Join(s.owners, ", ")
	return s
}

// Record timing: the relay records every stats interval (15 s); a record is
// fresh for a few of them, and a term has statsSlack more than its grace
// before its first claim must be on record.
const (
	recordFresh = 45 * time.Second
	statsSlack  = 30 * time.Second
)

// judgeRecord says, from its record, how a source stands at now, and
// whether the record's backlog is stale.
func judgeRecord(s SourceStatus, cs config.Source, now time.Time) SourceStatus {
	owners := s.owners
	if owners == nil {
		owners = []string{s.Owner}
	}
	holders := s.Held && s.RecordedBy != "" && slices.Contains(owners, s.RecordedBy)
	s.PendingStale = !holders
	if s.Updated != nil {
		s.PendingAgeSeconds = max(now.Sub(*s.Updated), 0).Seconds()
		if now.Sub(*s.Updated) > recordFresh {
			s.PendingStale = true
		}
	} else {
		s.PendingStale = true
	}
	s.State, s.Cause, s.Reason = judgeState(s, holders, cs, now)
	s.Stuck = ""
	if s.State == StateStuck {
		s.Stuck = s.Reason
	}
	return s
}

func judgeState(s SourceStatus, holders bool, cs config.Source, now time.Time) (state, cause, reason string) {
	if !s.Held {
		for _, sl := range s.Shards {
			if !sl.Held {
				return StateStuck, CauseLeaseUnheld, "no relay holds its bucket " + sl.Lease + " (no live lease)"
			}
		}
		return StateStuck, CauseLeaseUnheld, "no relay holds it (no live lease)"
	}
	sinkCause, sinkReason := sinkTrouble(s.Sinks)
	if !holders || s.LastClaim == nil {
		// The holder has not recorded a claim of its term yet.
		grace := cs.Readiness.MaxClaimFailure.D() + statsSlack
		term := time.Duration(0)
		if s.HeldSince != nil {
			term = max(now.Sub(*s.HeldSince), 0)
		}
		why := fmt.Sprintf("%s took the lease %s ago and has recorded no successful claim yet", s.Owner, term.Round(time.Second))
		if holders && sinkReason != "" {
			why += "; " + sinkReason
		}
		if term <= grace {
			return StateStarting, sinkCause, why
		}
		if holders && sinkCause != "" {
			return StateStuck, sinkCause, why
		}
		return StateStuck, CauseNoClaim, why
	}
	switch {
	case now.Sub(*s.LastClaim) > cs.Readiness.MaxClaimFailure.D()+statsSlack:
		why := fmt.Sprintf("no successful claim for %s", now.Sub(*s.LastClaim).Round(time.Second))
		if sinkReason != "" {
			return StateStuck, sinkCause, why + "; " + sinkReason
		}
		return StateStuck, CauseClaims, why
	case time.Duration(s.OldestPendingSeconds*float64(time.Second)) > cs.Readiness.MaxOldestPending.D():
		return StateStuck, CauseBacklog, fmt.Sprintf("the oldest pending event is %s old (readiness.max_oldest_pending %s)",
			time.Duration(s.OldestPendingSeconds*float64(time.Second)).Round(time.Second), cs.Readiness.MaxOldestPending)
	case sinkCause != "":
		return StateStuck, sinkCause, sinkReason
	}
	return StateRelaying, "", ""
}

// sinkTrouble is the first sink state, in name order, that stops the
// source: a circuit open, an exactly-once takeover failing.
func sinkTrouble(sinks map[string]string) (cause, reason string) {
	for _, name := range slices.Sorted(maps.Keys(sinks)) {
		st := sinks[name]
		switch {
		case st == "circuit open":
			return CauseCircuitOpen, "sink " + name + ": circuit open"
		case strings.HasPrefix(st, takeoverFailing):
			if strings.Contains(st, kerr.UnknownTopicOrPartition.Message) {
				return CauseTopicMissing, "sink " + name + ": " + st
			}
			return CauseTakeover, "sink " + name + ": " + st
		}
	}
	return "", ""
}

// overlay replaces, in st, what this process knows better than the
// records: the state of each source it serves, and the backlog of those it
// relays (counted now, not as last recorded).
func (a *App) overlay(st []SourceStatus, now time.Time) []SourceStatus {
	conds := a.conditions(now)
	a.mu.Lock()
	running := maps.Clone(a.running)
	a.mu.Unlock()
	for i := range st {
		s := &st[i]
		c, ok := conds[s.Source]
		if !ok {
			continue
		}
		s.State, s.Cause, s.Reason, s.Stuck = c.State, c.Cause, c.Reason, ""
		if c.State == StateStuck {
			s.Stuck = c.Reason
		}
		if w := running[s.Source].active(); w != nil {
			s.Pending, s.OldestPendingSeconds = w.Pending(), w.OldestPending().Seconds()
			s.PendingLive, s.PendingStale, s.PendingAgeSeconds = true, false, 0
		}
	}
	return st
}

// ReplicaStatus is one relay process sharing a database's sources, as
// `outbox-relay status` and the console show it.
type ReplicaStatus struct {
	Database string    `json:"database"`
	Owner    string    `json:"owner"`
	Since    time.Time `json:"since"`
	// Holds is how many leases (sources, or buckets of a split source) it
	// holds; Share how many each live replica is due (the database's
	// leases ÷ its live replicas, rounded up).
	Holds int `json:"holds"`
	Share int `json:"share"`
	// Self marks the process answering.
	Self bool `json:"self"`
}

// Replicas lists every database's live replicas and their shares of the
// sources st (as Status read them).
func (a *App) Replicas(ctx context.Context, st []SourceStatus) ([]ReplicaStatus, error) {
	var out []ReplicaStatus
	for _, db := range a.servingNames() {
		r, err := capability[driver.StatusReader](a, db, "read the relays' status")
		if err != nil {
			return nil, err
		}
		got, err := r.Replicas(ctx)
		if _, _, member := config.SplitMemberName(db); err != nil && member && ctx.Err() == nil {
			continue // out of service since Status read it: its sources say so
		} else if err != nil {
			return nil, fmt.Errorf("%s: read the replicas: %w", dbPath(db), err)
		}
		shards := 0 // a source split into buckets counts each
		for _, s := range st {
			if s.Database == db {
				shards += max(len(s.Shards), 1)
			}
		}
		for _, g := range got {
			out = append(out, ReplicaStatus{Database: db, Owner: g.Owner, Since: g.Since, Holds: g.Holds,
				Share: lease.Share(shards, len(got)), Self: g.Owner == a.owner})
		}
	}
	return out, nil
}
