package app

import (
	"context"
	"fmt"
	"slices"
	"strings"
	"time"

	"github.com/outbox-relay/outbox-relay/internal/admin"
	"github.com/outbox-relay/outbox-relay/internal/source"
	"github.com/outbox-relay/outbox-relay/internal/source/driver"
)

// consoleAPI is what the admin server's console and JSON API use: the
// same operations as `outbox-relay status` and `outbox-relay dlq`.
type consoleAPI struct{ a *App }

var _ admin.API = consoleAPI{}

// Sources is every source's status (what this process knows of the
// sources it serves in place of their records), the last hour of each
// source as its holders sampled it (pending, oldest pending age, events a
// second), and the replicas sharing the sources.
func (c consoleAPI) Sources(ctx context.Context) (any, error) {
	st, err := c.a.Status(ctx)
	if err != nil {
		return nil, err
	}
	st = c.a.overlay(st, time.Now())
	hist, err := c.a.readHistory(ctx)
	if err != nil {
		return nil, err
	}
	reps, err := c.a.Replicas(ctx, st)
	if err != nil {
		return nil, err
	}
	return struct {
		Sources  []SourceStatus     `json:"sources"`
		History  map[string][]point `json:"history"`
		Replicas []ReplicaStatus    `json:"replicas"`
	}{st, hist, reps}, nil
}

// deadLetter is a dead letter as the API shows it.
type deadLetter struct {
	ID              string    `json:"id"`
	Database        string    `json:"database"`
	Source          string    `json:"source"`
	OriginalEventID string    `json:"original_event_id"`
	EventType       string    `json:"event_type"`
	Topic           string    `json:"topic"`
	Reason          string    `json:"reason"`
	FailureCount    int       `json:"failure_count"`
	FirstFailedAt   time.Time `json:"first_failed_at"`
	LastFailedAt    time.Time `json:"last_failed_at"`
}

func (c consoleAPI) DeadLetters(ctx context.Context, f admin.DeadFilter) (any, error) {
	out := []deadLetter{}
	for _, db := range c.a.servingNames() {
		evs, err := c.a.ListFailed(ctx, db, source.DLQFilter{Source: f.Source, EventType: f.EventType, Since: f.Since,
			Reason: f.Reason, Newest: true, Limit: f.Limit})
		if err != nil {
			return nil, fmt.Errorf("%s: %w", dbPath(db), err)
		}
		for _, e := range evs {
			out = append(out, deadLetter{ID: e.ID, Database: db, Source: e.Source, OriginalEventID: e.OriginalEventID,
				EventType: e.EventType, Topic: e.Topic, Reason: e.Reason, FailureCount: e.FailureCount,
				FirstFailedAt: e.FirstFailedAt, LastFailedAt: e.LastFailedAt})
		}
	}
	slices.SortFunc(out, func(x, y deadLetter) int { return y.LastFailedAt.Compare(x.LastFailedAt) })
	if f.Limit > 0 && len(out) > f.Limit {
		out = out[:f.Limit]
	}
	return out, nil
}

func (c consoleAPI) Replay(ctx context.Context, ids []string, actor string) (int, error) {
	return c.eachDatabase(ids, func(db string) (int, error) {
		return c.a.ReplayDead(ctx, db, source.DLQFilter{IDs: ids}, actor)
	})
}

func (c consoleAPI) Purge(ctx context.Context, ids []string, actor string) (int, error) {
	return c.eachDatabase(ids, func(db string) (int, error) { return c.a.PurgeDead(ctx, db, ids, actor) })
}

// eachDatabase changes the dead letters with ids in every database (an id
// names a dead letter in one of them) and returns how many it changed; none
// is unknownIDs.
func (c consoleAPI) eachDatabase(ids []string, change func(db string) (int, error)) (int, error) {
	total := 0
	for _, db := range c.a.servingNames() {
		n, err := change(db)
		total += n
		if err != nil {
			return total, err
		}
	}
	if total == 0 {
		return 0, unknownIDs(strings.Join(ids, ", "))
	}
	return total, nil
}

// unknownIDs is a replay of ids that name no dead letter waiting.
type unknownIDs string

func (u unknownIDs) Error() string  { return "no dead letter waiting with id " + string(u) }
func (u unknownIDs) NotFound() bool { return true }

// ReplayDead puts the dead letters of database db that f selects back into
// their sources' pending sets, audited under actor, and returns how many.
func (a *App) ReplayDead(ctx context.Context, db string, f source.DLQFilter, actor string) (int, error) {
	evs, err := a.ListFailed(ctx, db, f)
	if err != nil || len(evs) == 0 {
		return 0, err
	}
	srcs, errs := a.resolveOn(ctx, db)
	if len(errs) > 0 {
		return 0, errs[0]
	}
	stores := map[string]*Source{}
	for _, s := range srcs {
		stores[s.Name] = s
	}
	total := 0
	for _, e := range evs {
		st, ok := stores[e.Source]
		if !ok {
			return total, fmt.Errorf("dead letter %s belongs to source %q, which the config does not have", e.ID, e.Source)
		}
		n, err := st.Replay(ctx, []source.FailedEvent{e}, actor)
		total += n
		if err != nil {
			return total, fmt.Errorf("replayed %d, then: %w", total, err)
		}
	}
	return total, nil
}

// PurgeDead deletes the dead letters of database db with these ids (not
// replayed), audited under actor, and returns how many.
func (a *App) PurgeDead(ctx context.Context, db string, ids []string, actor string) (int, error) {
	d, err := capability[driver.DeadLetters](a, db, "keep dead letters")
	if err != nil {
		return 0, err
	}
	return d.PurgeDead(ctx, ids, actor)
}
