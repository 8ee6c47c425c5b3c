package cli

import (
	"context"
	"errors"
	"fmt"
	"maps"
	"slices"
	"strings"
	"time"

	"github.com/spf13/cobra"

	"github.com/outbox-relay/outbox-relay/internal/app"
	"github.com/outbox-relay/outbox-relay/internal/config"
	"github.com/outbox-relay/outbox-relay/internal/source"
	"github.com/outbox-relay/outbox-relay/internal/source/driver"
)

func newCheck(g *globals) *cobra.Command {
	var skipSinks, strict bool
	cmd := &cobra.Command{
		Use:   "check",
		Short: "Validate the config, connect, and verify the role's privileges on every source",
		Long: `check validates the configuration, connects to every database, resolves every
source's layout against its table, and compares the role's grants with what
the layout needs: SELECT and UPDATE on each outbox table, DELETE only where
the layout deletes delivered rows. It reports grants that are missing and
grants that are more than needed (INSERT, DELETE, TRUNCATE). It says whether
the relay's own schema is migrated (run applies pending migrations at start,
if the role may), whether each PostgreSQL table has the wake-up trigger (run
installs it when it may), reaches every sink, and lists the Kafka topics the
configuration names that do not exist.

Every source and sink is checked, whatever fails before it; check exits
non-zero when something is missing (with --strict, also when the role has
more than it needs).

It also warns when a table's columns cannot prove per-key order (for
example random ids and a timestamp that rows of one multi-row INSERT
share), naming the fix; a warning is not a problem.`,
		RunE: func(cmd *cobra.Command, _ []string) error {
			cfg, log, err := g.load()
			if err != nil {
				return err
			}
			out := g.stdout
			fmt.Fprintf(out, "config %s: ok (%d sources)\n", g.configPath, len(cfg.Sources))
			ctx := cmd.Context()
			a, err := app.Open(ctx, cfg, log)
			if err != nil {
				return err
			}
			defer a.Close()
			c := &checker{out: out, a: a, cfg: cfg, strict: strict}
			for _, err := range a.DatabaseProblems() {
				c.problem("%v", err)
			}
			for _, name := range a.DatabaseNames() {
				fmt.Fprintf(out, "databases.%s: connected\n", name)
				if err := c.schema(ctx, name); err != nil {
					return fmt.Errorf("databases.%s: %w", name, err)
				}
			}
			srcs := c.sources(ctx)
			if !skipSinks {
				c.sinks(ctx, srcs)
			}
			if c.problems > 0 {
				return fmt.Errorf("check found %d problem(s)", c.problems)
			}
			fmt.Fprintln(out, "check passed")
			return nil
		},
	}
	cmd.Flags().BoolVar(&skipSinks, "skip-sinks", false, "do not try to reach the brokers (nor look for missing topics)")
	cmd.Flags().BoolVar(&strict, "strict", false, "also fail when the role has more privileges than needed")
	return cmd
}

// checker prints check's findings and counts the problems among them.
type checker struct {
	out      interface{ Write([]byte) (int, error) }
	a        *app.App
	cfg      *config.Config
	strict   bool
	problems int
}

func (c *checker) say(format string, args ...any) { fmt.Fprintf(c.out, format+"\n", args...) }

func (c *checker) problem(format string, args ...any) {
	c.problems++
	c.say(format, args...)
}

// schema reports how the relay's schema in database name stands.
func (c *checker) schema(ctx context.Context, name string) error {
	st, err := c.a.CheckSchema(ctx, name)
	if err != nil {
		return err
	}
	where := "relay schema " + c.cfg.RelaySchema
	if entry, _, _ := config.SplitMemberName(name); c.cfg.Databases[entry].Driver == "mysql" {
		where = "relay database " + c.cfg.RelaySchema
	}
	switch {
	case st.Pending > 0 && st.Pending == st.Total:
		c.say("databases.%s: %s: not migrated yet (%d migrations); run applies them at start, or run `outbox-relay migrate up`", name, where, st.Total)
	case st.Pending > 0:
		c.say("databases.%s: %s: %d of %d migrations pending; run applies them at start", name, where, st.Pending, st.Total)
	}
	if st.Pending > 0 {
		if !st.CanMigrate {
			c.problem("databases.%s: %s: MISSING the right to apply the migrations: have the schema's owner run `outbox-relay migrate up`, then grant this role what check asks for", name, where)
		}
		return nil
	}
	if len(st.Missing) == 0 {
		c.say("databases.%s: %s: ok", name, where)
	}
	for _, m := range st.Missing {
		c.problem("databases.%s: relay schema: MISSING %s", name, m)
	}
	return nil
}

// sources resolves and checks every source, and returns those resolved.
func (c *checker) sources(ctx context.Context) []*app.Source {
	srcs, errs := c.a.ResolveEach(ctx)
	for _, err := range errs {
		if i := c.managedMissing(err); i >= 0 {
			cs := c.cfg.Sources[i]
			c.say("source %s: table %s does not exist yet; run (or `outbox-relay migrate up`) creates it (manage_table)", cs.Name, cs.Table)
			continue
		}
		c.problem("%v", err)
	}
	for i, cs := range c.cfg.Sources {
		found := slices.ContainsFunc(srcs, func(s *app.Source) bool { return s.Index == i })
		if !found && c.cfg.Databases[cs.Database].Multi() {
			c.say("source %s: no database of %s is in service (yet)", cs.Name, cs.Database)
		} else if !found && cs.Discover != nil {
			c.say("source %s: discovery finds no table named %s in a schema matching %s (yet)",
				cs.Name, strings.Join(cs.Discover.Tables, " or "), cs.Discover.Schemas)
		}
	}
	for _, s := range srcs {
		c.source(ctx, s)
	}
	return srcs
}

// managedMissing returns the index of the source err is about when its
// table is missing and the relay creates it (manage_table), else -1.
func (c *checker) managedMissing(err error) int {
	if !errors.Is(err, source.ErrNoTable) {
		return -1
	}
	for i, cs := range c.cfg.Sources {
		if cs.ManageTable != nil && *cs.ManageTable && strings.Contains(err.Error(), config.SourcePath(i)+".") {
			return i
		}
	}
	return -1
}

func (c *checker) source(ctx context.Context, s *app.Source) {
	p, err := c.a.CheckGrants(ctx, s)
	if err != nil {
		c.problem("source %s: %v", s.Name, err)
		return
	}
	mode := "mode " + s.Layout.Mode
	if s.Config.Cursor() {
		mode = "capture cursor by " + s.Layout.XID + ": the relay writes nothing to it"
	}
	line := fmt.Sprintf("source %s: %s (%s) needs %s", s.Name, s.TableName(), mode, strings.Join(p.Need, ", "))
	missing := len(p.Missing) > 0
	if missing {
		line += ": MISSING " + strings.Join(p.Missing, ", ")
	} else {
		line += ": ok"
	}
	if len(p.Extra) > 0 {
		line += "; more than needed: " + strings.Join(p.Extra, ", ")
	}
	if missing || (c.strict && len(p.Extra) > 0) {
		c.problem("%s", line)
	} else {
		c.say("%s", line)
	}
	if s.OrderGap != "" {
		c.say("source %s: order: WARNING %s", s.Name, s.OrderGap)
	}
	if s.ClaimAdvice != "" {
		c.say("source %s: claims: WARNING %s", s.Name, s.ClaimAdvice)
	}
	if w, ok := s.Store.(driver.WALChecker); ok {
		c.wal(ctx, s, w)
		return
	}
	if !s.Notifies() || s.Config.Notify == "off" {
		return
	}
	if s.Layout.Queue != nil {
		if ch := s.Layout.Queue.Archive.Channel; ch != "" {
			c.say("source %s: wake-ups: LISTEN on channel %s (the queue's own trigger), poll every %s at most", s.Name, ch, s.Config.Poll.Fallback)
		}
		return
	}
	installed, canInstall, err := c.a.TriggerState(ctx, s)
	switch {
	case err != nil:
		c.problem("source %s: wake-up trigger: %v", s.Name, err)
	case installed:
		c.say("source %s: wake-up trigger: installed", s.Name)
	case s.Config.InstallTrigger != nil && !*s.Config.InstallTrigger:
		c.say("source %s: wake-up trigger: not installed (install_trigger: false): the relay polls", s.Name)
	case canInstall:
		c.say("source %s: wake-up trigger: not installed yet; run installs it (AFTER INSERT, statement level, NOTIFY on %s)", s.Name, c.cfg.RelaySchema)
	case s.Config.Notify == "on":
		c.problem("source %s: wake-up trigger: MISSING, and this role may not create it (needs TRIGGER on %s); notify: on needs it", s.Name, s.TableName())
	default:
		c.say("source %s: wake-up trigger: not installed, and this role may not create it (needs TRIGGER on %s): the relay polls", s.Name, s.TableName())
	}
}

// wal says what a source read by capture wal lacks, and how its slot
// stands; its stream wakes it, not a trigger.
func (c *checker) wal(ctx context.Context, s *app.Source, w driver.WALChecker) {
	problems, notes, err := w.CheckWAL(ctx)
	if err != nil {
		c.problem("source %s: capture wal: %v", s.Name, err)
		return
	}
	for _, p := range problems {
		c.problem("source %s: capture wal: %s", s.Name, p)
	}
	for _, n := range notes {
		c.say("source %s: capture wal: %s", s.Name, n)
	}
}

// sinks reaches every sink and lists the topics named in the configuration
// that a sink cannot find.
func (c *checker) sinks(ctx context.Context, srcs []*app.Source) {
	topics := app.Topics(srcs)
	progress := app.ProgressTopics(c.cfg, srcs)
	for _, name := range slices.Sorted(maps.Keys(c.cfg.Sinks)) {
		pctx, cancel := context.WithTimeout(ctx, 10*time.Second)
		err := c.a.PingSink(pctx, name)
		cancel()
		if err != nil {
			c.problem("sinks.%s: UNREACHABLE: %v", name, err)
			continue
		}
		c.say("sinks.%s: reachable", name)
		c.progress(ctx, name, progress[name])
		if len(topics[name]) == 0 {
			continue
		}
		c.dedup(ctx, name, topics[name])
		tctx, cancel := context.WithTimeout(ctx, 10*time.Second)
		missing, ok, err := c.a.MissingTopics(tctx, name, topics[name])
		cancel()
		switch {
		case err != nil:
			c.problem("sinks.%s: topics: %v", name, err)
		case !ok:
		case len(missing) > 0 && c.cfg.Sinks[name].AutoCreateTopics:
			c.say("sinks.%s: topics %s do not exist yet; the producer asks for them on first use (auto_create_topics)", name, strings.Join(missing, ", "))
		case len(missing) > 0:
			c.problem("sinks.%s: MISSING topics %s (their events would back off until the topics exist)", name, strings.Join(missing, ", "))
		default:
			c.say("sinks.%s: topics %s: ok", name, strings.Join(topics[name], ", "))
		}
	}
}

// progress checks that the exactly-once progress topics of sink name exist
// (bySources: the sources using each): without its topic a source's
// takeover fails, and it relays nothing.
func (c *checker) progress(ctx context.Context, name string, bySources map[string][]string) {
	for _, topic := range slices.Sorted(maps.Keys(bySources)) {
		srcs := strings.Join(bySources[topic], ", ")
		tctx, cancel := context.WithTimeout(ctx, 10*time.Second)
		missing, ok, err := c.a.MissingTopics(tctx, name, []string{topic})
		cancel()
		switch {
		case err != nil:
			c.problem("source %s: sinks.%s: exactly-once progress topic %s: %v", srcs, name, topic, err)
		case !ok:
		case len(missing) > 0 && c.cfg.Sinks[name].AutoCreateTopics:
			c.say("source %s: sinks.%s: exactly-once progress topic %s does not exist yet; run has it created when the source starts (auto_create_topics)",
				srcs, name, topic)
		case len(missing) > 0:
			c.problem("source %s: sinks.%s: exactly-once progress topic %s: MISSING: the source's takeover fails and it relays nothing until it exists; "+
				"create it, compacted (one partition is enough), e.g. kafka-topics.sh --bootstrap-server %s --create --topic %s --partitions 1 --config cleanup.policy=compact, "+
				"or set sinks.%s.auto_create_topics: true (or sinks.%s.progress_topic to a topic that exists)",
				srcs, name, topic, strings.Join(c.cfg.Sinks[name].Brokers, ","), topic, name, name)
		default:
			c.say("source %s: sinks.%s: exactly-once progress topic %s: ok", srcs, name, topic)
		}
	}
}

// dedup reports, for a sink whose destination deduplicates by message id
// within a window (NATS JetStream), whether the window covers the relay's
// retries: a retry after it would be stored twice.
func (c *checker) dedup(ctx context.Context, name string, subjects []string) {
	dctx, cancel := context.WithTimeout(ctx, 10*time.Second)
	defer cancel()
	ws, ok, err := c.a.DedupWindows(dctx, name, subjects)
	switch {
	case !ok:
		return
	case err != nil:
		c.problem("sinks.%s: duplicate window: %v", name, err)
		return
	}
	for _, w := range ws {
		if w.Window < w.Horizon {
			c.problem("sinks.%s: subject %s: stream %s forgets message ids after %s, but a retry may come %s after the first attempt (retry_horizon): raise the stream's duplicate_window to at least %s, or a retried event may be stored twice",
				name, w.Subject, w.Stream, w.Window, w.Horizon, w.Horizon)
			continue
		}
		c.say("sinks.%s: subject %s: stream %s deduplicates for %s, covering retries up to %s: ok", name, w.Subject, w.Stream, w.Window, w.Horizon)
	}
}
