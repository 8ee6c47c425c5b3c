package cli

import (
	"fmt"
	"sort"

	"github.com/spf13/cobra"

	"github.com/outbox-relay/outbox-relay/internal/app"
	"github.com/outbox-relay/outbox-relay/internal/config"
)

func newMigrate(g *globals) *cobra.Command {
	cmd := &cobra.Command{
		Use:   "migrate",
		Short: "Create, upgrade or roll back the relay's own schema (up also creates and upgrades the outbox tables the relay manages)",
	}
	var (
		all    bool
		loaded *config.Config // the configuration each is working through
	)
	each := func(fn func(name string, m app.Migrator) error) error {
		cfg, _, err := g.load()
		if err != nil {
			return err
		}
		loaded = cfg
		names := make([]string, 0, len(cfg.Databases))
		for n := range cfg.Databases {
			names = append(names, n)
		}
		sort.Strings(names)
		for _, n := range names {
			m, err := app.NewMigrator(cfg, n)
			if err != nil {
				return err
			}
			err = fn(n, m)
			_ = m.Close()
			if err != nil {
				return fmt.Errorf("databases.%s: %w", n, err)
			}
		}
		return nil
	}
	up := &cobra.Command{Use: "up", Short: "Apply every pending migration", RunE: func(cmd *cobra.Command, _ []string) error {
		return each(func(n string, m app.Migrator) error {
			applied, err := app.Up(cmd.Context(), m)
			if err != nil {
				return err
			}
			for _, s := range applied {
				fmt.Fprintf(g.stdout, "%s: applied %05d %s\n", n, s.Version, s.Name)
			}
			if err := app.MigrateTables(cmd.Context(), loaded, n); err != nil {
				return err
			}
			if len(applied) == 0 {
				fmt.Fprintf(g.stdout, "%s: already up to date\n", n)
			} else {
				fmt.Fprintf(g.stdout, "%s: up to date (%d applied)\n", n, len(applied))
			}
			return nil
		})
	}}
	down := &cobra.Command{Use: "down", Short: "Roll back the newest migration (--all: every one, and drop the schema)", RunE: func(cmd *cobra.Command, _ []string) error {
		return each(func(n string, m app.Migrator) error {
			undone, err := app.Down(cmd.Context(), m, all)
			if err != nil {
				return err
			}
			for _, s := range undone {
				fmt.Fprintf(g.stdout, "%s: rolled back %05d %s\n", n, s.Version, s.Name)
			}
			if len(undone) == 0 {
				fmt.Fprintf(g.stdout, "%s: nothing to roll back\n", n)
			}
			if all {
				fmt.Fprintf(g.stdout, "%s: relay schema dropped\n", n)
			}
			return nil
		})
	}}
	down.Flags().BoolVar(&all, "all", false, "roll back every migration and drop the relay schema")
	status := &cobra.Command{Use: "status", Short: "List migrations and whether each is applied", RunE: func(cmd *cobra.Command, _ []string) error {
		return each(func(n string, m app.Migrator) error {
			st, err := m.Status(cmd.Context())
			if err != nil {
				return err
			}
			for _, s := range st {
				state := "pending"
				if s.Applied {
					state = "applied"
				}
				fmt.Fprintf(g.stdout, "%s\t%05d\t%-8s\t%s\n", n, s.Version, state, s.Name)
			}
			return nil
		})
	}}
	cmd.AddCommand(up, down, status)
	return cmd
}
