package cli

import (
	"context"
	"log/slog"
	"os"
	"time"

	"github.com/spf13/cobra"

	"github.com/outbox-relay/outbox-relay/internal/app"
	"github.com/outbox-relay/outbox-relay/internal/config"
	"github.com/outbox-relay/outbox-relay/internal/config/compat"
	"github.com/outbox-relay/outbox-relay/internal/inviqa"
)

func newRun(g *globals) *cobra.Command {
	var noMigrate bool
	var inviqaFlags *compat.Flags
	cmd := &cobra.Command{
		Use:   "run",
		Short: "Relay every configured source until SIGTERM or SIGINT",
		Long: "Relay every configured source until SIGTERM or SIGINT.\n\n" +
			"Without --config, when DB_DRIVER and DB_HOST are set (or with --" + compat.ForceFlag + "), the\n" +
			"configuration comes from the environment variables and flags of inviqa/kafka-outbox-relay;\n" +
			"see docs/inviqa-migration.md.",
		RunE: func(cmd *cobra.Command, _ []string) error {
			ctx := cmd.Context()
			var cfg *config.Config
			var log *slog.Logger
			if inviqaFlags.Active(cmd.Flags().Changed("config"), os.LookupEnv) {
				in, err := inviqaFlags.Load()
				if err != nil {
					return err
				}
				cfg, log = in.Config, newLogger(g.stderr, in.Config.Log)
				compat.LogSettings(log, in)
				switch {
				case in.Job != "":
					return inviqa.RunJob(ctx, in, log)
				case in.PollingDisabled:
					return inviqa.Idle(ctx, in, log)
				}
			} else {
				var err error
				if cfg, log, err = g.load(); err != nil {
					return err
				}
			}
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
			stopping := make(chan time.Time, 1)
			context.AfterFunc(ctx, func() {
				stopping <- time.Now()
				log.Info("shutting down: finishing the batches in flight, then closing the sinks",
					"cause", context.Cause(ctx), "timeout", cfg.Shutdown.Timeout.D())
			})
			err = a.Run(ctx)
			if ctx.Err() == nil {
				return err // Run failed; the deferred Close still runs
			}
			since := <-stopping
			log.Info("batches in flight finished", "took", time.Since(since).Round(time.Millisecond))
			a.Close()
			log.Info("relay stopped", "took", time.Since(since).Round(time.Millisecond))
			return err
		},
	}
	cmd.Flags().BoolVar(&noMigrate, "no-migrate", false, "do not apply the relay's schema migrations at start")
	inviqaFlags = compat.AddFlags(cmd)
	return cmd
}
