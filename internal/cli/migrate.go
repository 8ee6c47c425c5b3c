package cli

import (
	"context"
	"fmt"
	"strings"

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
	// each runs fn on the migrator of every database, those of
	// multi-database entries included. A database of the configuration
	// that fails stops it; a member that fails is reported and the others
	// go on (the command then fails).
	each := func(ctx context.Context, fn func(name string, db config.Database, m app.Migrator) error) error {
		cfg, _, err := g.load()
		if err != nil {
			return err
		}
		loaded = cfg
		targets, err := app.Databases(ctx, cfg)
		if err != nil {
			return err
		}
		var failed []string
		for _, tg := range targets {
			m, err := app.NewMigratorFor(cfg, tg.Name, tg.Database)
			if err == nil {
				err = fn(tg.Name, tg.Database, m)
				_ = m.Close()
			}
			switch {
			case err != nil && tg.Member():
				fmt.Fprintf(g.stdout, "%s: FAILED: %v\n", tg.Name, err)
				failed = append(failed, tg.Name)
			case err != nil:
				return fmt.Errorf("databases.%s: %w", tg.Name, err)
			}
		}
		if len(failed) > 0 {
			return fmt.Errorf("%d database(s) failed: %s", len(failed), strings.Join(failed, ", "))
		}
		return nil
	}
	up := &cobra.Command{Use: "up", Short: "Apply every pending migration", RunE: func(cmd *cobra.Command, _ []string) error {
		return each(cmd.Context(), func(n string, db config.Database, m app.Migrator) error {
			applied, err := app.Up(cmd.Context(), m)
			if err != nil {
				return err
			}
			for _, s := range applied {
				fmt.Fprintf(g.stdout, "%s: applied %05d %s\n", n, s.Version, s.Name)
			}
			if err := app.MigrateTablesOn(cmd.Context(), loaded, n, db); err != nil {
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
		return each(cmd.Context(), func(n string, _ config.Database, m app.Migrator) error {
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
		return each(cmd.Context(), func(n string, _ config.Database, m app.Migrator) error {
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
