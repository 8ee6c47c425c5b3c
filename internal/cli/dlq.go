package cli

import (
	"errors"
	"fmt"
	"maps"
	"slices"
	"text/tabwriter"
	"time"

	"github.com/spf13/cobra"

	"github.com/outbox-relay/outbox-relay/internal/app"
	"github.com/outbox-relay/outbox-relay/internal/config"
	"github.com/outbox-relay/outbox-relay/internal/source"
)

type dlqFlags struct {
	database  string
	ids       []string
	eventIDs  []string
	source    string
	eventType string
	since     time.Duration
	all       bool
	replayed  bool
	limit     int
}

func (f *dlqFlags) filter() source.DLQFilter {
	flt := source.DLQFilter{IDs: f.ids, EventIDs: f.eventIDs, Source: f.source, EventType: f.eventType,
		IncludeReplayed: f.replayed, Limit: f.limit}
	if f.since > 0 {
		flt.Since = time.Now().Add(-f.since)
	}
	return flt
}

func newDLQ(g *globals) *cobra.Command {
	cmd := &cobra.Command{Use: "dlq", Short: "Inspect and replay dead-lettered events"}
	f := &dlqFlags{}
	bind := func(c *cobra.Command) {
		c.Flags().StringVar(&f.database, "database", "", "database to look in (default: the only one); a database of an entry with dsns or discover is <entry>/<database>")
		c.Flags().StringSliceVar(&f.ids, "id", nil, "dead letter id (failed_events.id); repeatable")
		c.Flags().StringSliceVar(&f.eventIDs, "event-id", nil, "original event id; repeatable")
		c.Flags().StringVar(&f.source, "source", "", "only this source")
		c.Flags().StringVar(&f.eventType, "event-type", "", "only this event type")
		c.Flags().DurationVar(&f.since, "since", 0, "only dead letters that first failed within this long")
		c.Flags().IntVar(&f.limit, "limit", 0, "at most this many")
	}
	list := &cobra.Command{Use: "list", Short: "List dead letters (not yet replayed, unless --replayed)", RunE: func(cmd *cobra.Command, _ []string) error {
		a, db, cleanup, err := openForDLQ(cmd, g, f)
		if err != nil {
			return err
		}
		defer cleanup()
		evs, err := a.ListFailed(cmd.Context(), db, f.filter())
		if err != nil {
			return err
		}
		tw := tabwriter.NewWriter(g.stdout, 0, 4, 2, ' ', 0)
		fmt.Fprintln(tw, "ID\tSOURCE\tEVENT ID\tEVENT TYPE\tTOPIC\tFAILURES\tFIRST FAILED\tREPLAYED\tREASON")
		for _, e := range evs {
			replayed := "-"
			if e.ReplayedAt != nil {
				replayed = e.ReplayedAt.Format(time.RFC3339)
			}
			fmt.Fprintf(tw, "%s\t%s\t%s\t%s\t%s\t%d\t%s\t%s\t%s\n", e.ID, e.Source, e.OriginalEventID, e.EventType, e.Topic,
				e.FailureCount, e.FirstFailedAt.Format(time.RFC3339), replayed, e.Reason)
		}
		return tw.Flush()
	}}
	replay := &cobra.Command{Use: "replay", Short: "Put dead letters back into their source's pending set", RunE: func(cmd *cobra.Command, _ []string) error {
		if len(f.ids) == 0 && len(f.eventIDs) == 0 && f.source == "" && f.eventType == "" && f.since == 0 && !f.all {
			return errors.New("say which dead letters to replay: --id, --event-id, --source, --event-type, --since, or --all")
		}
		a, db, cleanup, err := openForDLQ(cmd, g, f)
		if err != nil {
			return err
		}
		defer cleanup()
		total, err := a.ReplayDead(cmd.Context(), db, f.filter(), actor())
		if err != nil {
			return err
		}
		fmt.Fprintf(g.stdout, "replayed %d dead letter(s)\n", total)
		return nil
	}}
	bind(list)
	list.Flags().BoolVar(&f.replayed, "replayed", false, "include dead letters already replayed")
	bind(replay)
	replay.Flags().BoolVar(&f.all, "all", false, "replay every dead letter that matches (with no other filter: all of them)")
	purge := &cobra.Command{Use: "purge", Short: "Delete dead letters' records for good (audited); their rows stay as they are", RunE: func(cmd *cobra.Command, _ []string) error {
		if len(f.ids) == 0 {
			return errors.New("say which dead letters to purge: --id (see dlq list)")
		}
		a, db, cleanup, err := openForDLQ(cmd, g, f)
		if err != nil {
			return err
		}
		defer cleanup()
		n, err := a.PurgeDead(cmd.Context(), db, f.ids, actor())
		if err != nil {
			return err
		}
		fmt.Fprintf(g.stdout, "purged %d dead letter(s)\n", n)
		return nil
	}}
	bind(purge)
	cmd.AddCommand(list, replay, purge)
	return cmd
}

func openForDLQ(cmd *cobra.Command, g *globals, f *dlqFlags) (*app.App, string, func(), error) {
	cfg, log, err := g.load()
	if err != nil {
		return nil, "", nil, err
	}
	db := f.database
	if db == "" {
		if len(cfg.Databases) != 1 || cfg.Databases[firstKey(cfg.Databases)].Multi() {
			return nil, "", nil, errors.New("--database is required when the config has several databases (a database of an entry with dsns or discover is named <entry>/<database>)")
		}
		db = firstKey(cfg.Databases)
	}
	if _, ok := cfg.Databases[db]; !ok {
		if entry, _, member := config.SplitMemberName(db); !member || !cfg.Databases[entry].Multi() {
			return nil, "", nil, fmt.Errorf("--database: unknown database %q", db)
		}
	}
	a, err := app.Open(cmd.Context(), cfg, log)
	if err != nil {
		return nil, "", nil, err
	}
	if !a.HasDatabase(db) {
		a.Close()
		return nil, "", nil, fmt.Errorf("--database: database %q was not found or cannot be reached", db)
	}
	return a, db, a.Close, nil
}

// firstKey is the first key of m in order.
func firstKey[V any](m map[string]V) string {
	return slices.Sorted(maps.Keys(m))[0]
}
