package app

import (
	"cmp"
	"context"
	"fmt"
	"slices"
	"strings"
	"time"

	"github.com/outbox-relay/outbox-relay/internal/config"
	"github.com/outbox-relay/outbox-relay/internal/sink"
	"github.com/outbox-relay/outbox-relay/internal/sink/nats"
	"github.com/outbox-relay/outbox-relay/internal/source"
	"github.com/outbox-relay/outbox-relay/internal/source/driver"
)

// ListFailed lists the dead letters of database db that f selects.
func (a *App) ListFailed(ctx context.Context, db string, f source.DLQFilter) ([]source.FailedEvent, error) {
	d, err := capability[driver.DeadLetters](a, db, "keep dead letters")
	if err != nil {
		return nil, err
	}
	evs, err := d.ListFailed(ctx, f)
	if _, _, member := config.SplitMemberName(db); !member || err != nil {
		return evs, err
	}
	return slices.DeleteFunc(evs, func(e source.FailedEvent) bool { return !a.belongs(db, e.Source) }), nil
}

// Replay puts dead letters of source s back into its table's pending set,
// recording actor in the audit table.
func (s *Source) Replay(ctx context.Context, events []source.FailedEvent, actor string) (int, error) {
	r, ok := s.Store.(driver.Replayer)
	if !ok {
		return 0, fmt.Errorf("source %s: its store cannot replay dead letters", s.Name)
	}
	return r.Replay(ctx, events, actor)
}

// CheckRelaySchema lists what the relay's own schema (a database on MySQL)
// lacks in database db for the relay to run.
func (a *App) CheckRelaySchema(ctx context.Context, db string) ([]string, error) {
	c, err := capability[driver.SchemaChecker](a, db, "check the relay schema")
	if err != nil {
		return nil, err
	}
	return c.CheckRelaySchema(ctx)
}

// Grants is what a source's layout needs on its table, and how the role's
// grants compare.
type Grants struct {
	Need, Missing, Extra []string
}

// CheckGrants compares the role's grants on the source's table with what
// its layout needs.
func (a *App) CheckGrants(ctx context.Context, s *Source) (Grants, error) {
	need := s.Layout.NeededPrivileges()
	c, ok := s.Table.(driver.PrivilegeChecker)
	if !ok {
		conf, _ := a.dbConfig(s.Config.Database)
		return Grants{Need: need}, fmt.Errorf("the %s driver cannot check privileges", conf.Driver)
	}
	p, err := c.CheckPrivileges(ctx, need, s.Layout.UpdatedColumns()...)
	return Grants{Need: need, Missing: p.Missing, Extra: p.Extra}, err
}

// SchemaState is how a database's relay schema stands for the role the
// relay connects as.
type SchemaState struct {
	// Total and Pending count the relay's migrations and those not yet
	// applied; Pending is -1 when the role cannot read them.
	Total, Pending int
	// CanMigrate says whether the role can apply what is pending, as run
	// does at start.
	CanMigrate bool
	// Missing is what the role lacks on the schema's tables to run.
	Missing []string
}

// CheckSchema reports how database db's relay schema stands.
func (a *App) CheckSchema(ctx context.Context, db string) (SchemaState, error) {
	var st SchemaState
	conf, ok := a.dbConfig(db)
	if !ok {
		return st, fmt.Errorf("unknown database %q", db)
	}
	m, err := NewMigratorFor(a.cfg, db, conf)
	if err != nil {
		return st, err
	}
	defer func() { _ = m.Close() }()
	st.Pending = -1
	if list, err := m.Status(ctx); err == nil {
		st.Total, st.Pending = len(list), 0
		for _, s := range list {
			if !s.Applied {
				st.Pending++
			}
		}
	}
	c, err := capability[driver.SchemaChecker](a, db, "check the relay schema")
	if err != nil {
		return st, err
	}
	if st.CanMigrate, err = c.CanMigrate(ctx); err != nil {
		return st, err
	}
	st.Missing, err = a.CheckRelaySchema(ctx, db)
	return st, err
}

// Topics lists, per sink, the topics the sources' configurations name
// literally (a template's topics depend on the rows).
func Topics(srcs []*Source) map[string][]string {
	out := map[string][]string{}
	add := func(sinkName, topic string) {
		if sinkName != "" && topic != "" && !slices.Contains(out[sinkName], topic) {
			out[sinkName] = append(out[sinkName], topic)
		}
	}
	for _, s := range srcs {
		if len(s.Layout.Topic.Columns()) == 0 {
			add(s.Config.Sink, s.Layout.Topic.String())
		}
		for _, r := range s.Config.Routes {
			if r.Topic != "" && !strings.Contains(r.Topic, "{") {
				add(r.Sink, r.Topic)
			}
		}
	}
	for _, ts := range out {
		slices.Sort(ts)
	}
	return out
}

// ProgressTopics are, by sink and then topic, the sources with delivery
// exactly_once that record their progress there (sorted).
func ProgressTopics(cfg *config.Config, srcs []*Source) map[string]map[string][]string {
	out := map[string]map[string][]string{}
	for _, s := range srcs {
		if s.Config.Delivery != config.DeliveryExactlyOnce {
			continue
		}
		sinkName := s.Config.Sink
		topic := cmp.Or(cfg.Sinks[sinkName].ProgressTopic, config.DefaultProgressTopic)
		if out[sinkName] == nil {
			out[sinkName] = map[string][]string{}
		}
		if !slices.Contains(out[sinkName][topic], s.Name) {
			out[sinkName][topic] = append(out[sinkName][topic], s.Name)
			slices.Sort(out[sinkName][topic])
		}
	}
	return out
}

// MissingTopics returns those of topics that sink name cannot find, for
// sinks that can tell (Kafka); ok is false for the others.
func (a *App) MissingTopics(ctx context.Context, name string, topics []string) (missing []string, ok bool, err error) {
	s, err := a.sink(name)
	if err != nil {
		return nil, false, err
	}
	if w, isWrapped := s.(interface{ Unwrap() sink.Publisher }); isWrapped {
		s = w.Unwrap()
	}
	m, ok := s.(interface {
		MissingTopics(context.Context, []string) ([]string, error)
	})
	if !ok {
		return nil, false, nil
	}
	missing, err = m.MissingTopics(ctx, topics)
	return missing, true, err
}

// DedupWindow is how long a sink's destination remembers a message id for
// deduplication (a NATS stream's duplicate window), against how long after
// a failure the relay may send the message again.
type DedupWindow struct {
	Subject, Stream string
	Window, Horizon time.Duration
}

// DedupWindows looks up, for each of subjects, the deduplication window of
// sink name; ok is false for sinks without one.
func (a *App) DedupWindows(ctx context.Context, name string, subjects []string) (out []DedupWindow, ok bool, err error) {
	s, err := a.sink(name)
	if err != nil {
		return nil, false, err
	}
	if w, isWrapped := s.(interface{ Unwrap() sink.Publisher }); isWrapped {
		s = w.Unwrap()
	}
	n, ok := s.(*nats.Publisher)
	if !ok {
		return nil, false, nil
	}
	for _, subj := range subjects {
		w, err := n.DuplicateWindow(ctx, subj)
		if err != nil {
			return out, true, err
		}
		out = append(out, DedupWindow{Subject: subj, Stream: w.Stream, Window: w.Window, Horizon: w.Horizon})
	}
	return out, true, nil
}

// TriggerState says whether the wake-up trigger is on a source's table
// and, if not, whether run can install it; a table that cannot carry one
// has none and cannot get one.
func (a *App) TriggerState(ctx context.Context, s *Source) (installed, canInstall bool, err error) {
	t, ok := s.Table.(driver.Triggered)
	if !ok {
		return false, false, nil
	}
	if installed, err = t.HasTrigger(ctx); err != nil || installed {
		return installed, false, err
	}
	canInstall, err = t.CanInstallTrigger(ctx)
	return false, canInstall, err
}
