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
			if err := m.Up(cmd.Context()); err != nil {
				return err
			}
			if err := app.MigrateTables(cmd.Context(), loaded, n); err != nil {
				return err
			}
			fmt.Fprintf(g.stdout, "%s: up to date\n", n)
			return nil
		})
	}}
	down := &cobra.Command{Use: "down", Short: "Roll back the newest migration (--all: every one, and drop the schema)", RunE: func(cmd *cobra.Command, _ []string) error {
		return each(func(n string, m app.Migrator) error {
			if err := m.Down(cmd.Context(), all); err != nil {
				return err
			}
			fmt.Fprintf(g.stdout, "%s: rolled back\n", n)
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
