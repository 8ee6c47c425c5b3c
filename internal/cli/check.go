package cli

import (
	"context"
	"fmt"
	"maps"
	"slices"
	"strings"
	"time"

	"github.com/spf13/cobra"

	"github.com/outbox-relay/outbox-relay/internal/app"
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
grants that are more than needed (INSERT, DELETE, TRUNCATE). It exits non-zero
when something is missing (with --strict, also when something is extra).

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
			problems := 0
			for _, name := range slices.Sorted(maps.Keys(cfg.Databases)) {
				fmt.Fprintf(out, "databases.%s: connected\n", name)
				missing, err := a.CheckRelaySchema(ctx, name)
				if err != nil {
					return err
				}
				if len(missing) == 0 {
					fmt.Fprintf(out, "databases.%s: relay schema %s: ok\n", name, cfg.RelaySchema)
				}
				for _, m := range missing {
					problems++
					fmt.Fprintf(out, "databases.%s: relay schema: MISSING %s\n", name, m)
				}
			}
			srcs, err := a.Resolve(ctx)
			if err != nil {
				return err
			}
			for i, cs := range cfg.Sources {
				found := 0
				for _, s := range srcs {
					if s.Index == i {
						found++
					}
				}
				if found == 0 && cs.Discover != nil {
					fmt.Fprintf(out, "source %s: discovery finds no table named %s in a schema matching %s (yet)\n",
						cs.Name, strings.Join(cs.Discover.Tables, " or "), cs.Discover.Schemas)
				}
			}
			for _, s := range srcs {
				p, err := a.CheckGrants(ctx, s)
				if err != nil {
					return err
				}
				line := fmt.Sprintf("source %s: %s (mode %s) needs %s", s.Name, s.TableName(), s.Layout.Mode, strings.Join(p.Need, ", "))
				switch {
				case len(p.Missing) > 0:
					problems++
					line += ": MISSING " + strings.Join(p.Missing, ", ")
				default:
					line += ": ok"
				}
				if len(p.Extra) > 0 {
					if strict {
						problems++
					}
					line += "; more than needed: " + strings.Join(p.Extra, ", ")
				}
				fmt.Fprintln(out, line)
				if s.OrderGap != "" {
					fmt.Fprintf(out, "source %s: order: WARNING %s\n", s.Name, s.OrderGap)
				}
			}
			if !skipSinks {
				for _, name := range slices.Sorted(maps.Keys(cfg.Sinks)) {
					if err := pingSink(ctx, a, name); err != nil {
						problems++
						fmt.Fprintf(out, "sinks.%s: UNREACHABLE: %v\n", name, err)
					} else {
						fmt.Fprintf(out, "sinks.%s: reachable\n", name)
					}
				}
			}
			if problems > 0 {
				return fmt.Errorf("check found %d problem(s)", problems)
			}
			fmt.Fprintln(out, "check passed")
			return nil
		},
	}
	cmd.Flags().BoolVar(&skipSinks, "skip-sinks", false, "do not try to reach the brokers")
	cmd.Flags().BoolVar(&strict, "strict", false, "also fail when the role has more privileges than needed")
	return cmd
}

func pingSink(ctx context.Context, a *app.App, name string) error {
	ctx, cancel := context.WithTimeout(ctx, 10*time.Second)
	defer cancel()
	return a.PingSink(ctx, name)
}
