package app

import (
	"context"
	"fmt"
	"slices"
	"strings"
	"time"

	"github.com/outbox-relay/outbox-relay/internal/config"
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
	// Stuck says why the source is stuck; empty when it is not.
	Stuck string `json:"stuck,omitempty"`
}

// Status reads the state of every source of the configuration, as the
// relays recorded it, and judges whether each is stuck.
func (a *App) Status(ctx context.Context) ([]SourceStatus, error) {
	var out []SourceStatus
	for _, db := range slices.Sorted(func(yield func(string) bool) {
		for n := range a.cfg.Databases {
			if !yield(n) {
				return
			}
		}
	}) {
		r, err := capability[driver.StatusReader](a, db, "read the relays' status")
		if err != nil {
			return nil, err
		}
		got, err := r.Status(ctx)
		if err != nil {
			return nil, fmt.Errorf("databases.%s: read status: %w", db, err)
		}
		for _, g := range got {
			s := SourceStatus{Source: g.Source, Database: db, Table: g.Table, Owner: g.Owner, Term: g.Term, Held: g.Held,
				Pending: g.Pending, OldestPendingSeconds: g.OldestPendingSeconds, EventsPerSecond: g.EventsPerSecond,
				Retrying: g.Retrying, DeadLetters: g.DeadLetters, LastClaim: g.LastClaim, Updated: g.Updated, Sinks: g.Sinks}
			if g.Schema != "" {
				s.Table = g.Schema + "." + g.Table
			}
			out = append(out, s)
		}
	}
	return a.judge(out), nil
}

// judge keeps the sources of this configuration (a discovered source is
// "rule:schema.table"), adds those no relay has recorded yet, and says
// which are stuck.
func (a *App) judge(recorded []SourceStatus) []SourceStatus {
	var out []SourceStatus
	now := time.Now()
	for _, cs := range a.cfg.Sources {
		found := false
		for _, s := range recorded {
			if s.Source != cs.Name && !strings.HasPrefix(s.Source, cs.Name+":") {
				continue
			}
			found = true
			s.Stuck = stuck(s, cs, now)
			out = append(out, s)
		}
		if !found {
			out = append(out, SourceStatus{Source: cs.Name, Database: cs.Database, Table: cs.Table,
				Sinks: map[string]string{}, Stuck: "no relay has recorded it yet"})
		}
	}
	return out
}

// stuck says why a source is stuck, or "".
func stuck(s SourceStatus, cs config.Source, now time.Time) string {
	// The relay records every stats interval (15 s): allow for it.
	const slack = 30 * time.Second
	switch {
	case !s.Held:
		return "no relay holds it (no live lease)"
	case s.LastClaim == nil:
		return "no successful claim recorded"
	case now.Sub(*s.LastClaim) > cs.Readiness.MaxClaimFailure.D()+slack:
		return fmt.Sprintf("no successful claim for %s", now.Sub(*s.LastClaim).Round(time.Second))
	case time.Duration(s.OldestPendingSeconds*float64(time.Second)) > cs.Readiness.MaxOldestPending.D():
		return fmt.Sprintf("the oldest pending event is %s old (readiness.max_oldest_pending %s)",
			time.Duration(s.OldestPendingSeconds*float64(time.Second)).Round(time.Second), cs.Readiness.MaxOldestPending)
	}
	for name, st := range s.Sinks {
		if st == "circuit open" {
			return "sink " + name + ": circuit open"
		}
	}
	return ""
}
