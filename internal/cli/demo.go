package cli

import (
	"log/slog"
	"os"

	"github.com/spf13/cobra"

	"github.com/outbox-relay/outbox-relay/internal/config"
	"github.com/outbox-relay/outbox-relay/internal/demo"
)

func newDemo(g *globals) *cobra.Command {
	o := demo.Options{}
	var verbose bool
	cmd := &cobra.Command{
		Use:   "demo",
		Short: "Relay events from the local PostgreSQL to an in-process Kafka broker and show what arrives",
		Long: `demo needs no configuration. It creates a throwaway outbox table in the local
PostgreSQL (DATABASE_URL, default postgres://postgres@127.0.0.1:5432/postgres),
starts an in-process Kafka broker, writes events from several producers (some
transactions rolled back), runs the relay, and checks with a consumer that
every committed event arrived, no rolled-back one did, and each key kept its
order. It drops its tables when done.`,
		RunE: func(cmd *cobra.Command, _ []string) error {
			if o.DSN == "" {
				o.DSN = os.Getenv("DATABASE_URL")
			}
			if o.DSN == "" {
				o.DSN = demo.DefaultDSN
			}
			o.Out = g.stdout
			level := "warn"
			if verbose {
				level = "info"
			}
			o.Logger = newLogger(g.stderr, config.Log{Level: level, Format: "text"})
			if !verbose {
				o.Logger = slog.New(slog.NewTextHandler(g.stderr, &slog.HandlerOptions{Level: slog.LevelError}))
			}
			_, err := demo.Run(cmd.Context(), o)
			return err
		},
	}
	cmd.Flags().StringVar(&o.DSN, "dsn", "", "PostgreSQL DSN (default $DATABASE_URL, else the local server)")
	cmd.Flags().IntVar(&o.Events, "events", 50000, "committed events to write")
	cmd.Flags().IntVar(&o.Producers, "producers", 4, "concurrent producers")
	cmd.Flags().IntVar(&o.Keys, "keys", 1000, "distinct keys")
	cmd.Flags().IntVar(&o.Backlog, "backlog", 100000, "events written while the relay is stopped, then drained (0: skip)")
	cmd.Flags().BoolVarP(&verbose, "verbose", "v", false, "show the relay's logs")
	hideConfigFlag(cmd)
	return cmd
}
