package cli

import (
	"github.com/spf13/cobra"

	"github.com/outbox-relay/outbox-relay/internal/app"
)

func newRun(g *globals) *cobra.Command {
	var noMigrate bool
	cmd := &cobra.Command{
		Use:   "run",
		Short: "Relay every configured source until SIGTERM or SIGINT",
		RunE: func(cmd *cobra.Command, _ []string) error {
			cfg, log, err := g.load()
			if err != nil {
				return err
			}
			ctx := cmd.Context()
			a, err := app.Open(ctx, cfg, log)
			if err != nil {
				return err
			}
			defer a.Close()
			if !noMigrate {
				if err := a.Migrate(ctx); err != nil {
					return err
				}
			}
			log.Info("relay starting", "sources", len(cfg.Sources))
			err = a.Run(ctx)
			log.Info("relay stopped")
			return err
		},
	}
	cmd.Flags().BoolVar(&noMigrate, "no-migrate", false, "do not apply the relay's schema migrations at start")
	return cmd
}
