// Package cli is the outbox-relay command line: run, migrate, check, dlq,
// retention, optimize, demo. cmd/outbox-relay only calls Execute.
package cli

import (
	"context"
	"fmt"
	"io"
	"log/slog"
	"os"
	"os/signal"
	"strings"
	"syscall"

	"github.com/spf13/cobra"

	"github.com/outbox-relay/outbox-relay/internal/buildinfo"
	"github.com/outbox-relay/outbox-relay/internal/config"
	// Registers the database drivers (postgres, mysql) that configurations name.
	_ "github.com/outbox-relay/outbox-relay/internal/source/all"
)

// Execute runs the command line with args and returns the exit code.
func Execute(ctx context.Context, args []string, stdout, stderr io.Writer) int {
	ctx, stop := signalContext(ctx)
	defer stop()
	root := NewRoot(stdout, stderr)
	root.SetArgs(args)
	if err := root.ExecuteContext(ctx); err != nil {
		fmt.Fprintln(stderr, "error:", err)
		return 1
	}
	return 0
}

// Signalled is the cause of a command's context once SIGINT or SIGTERM
// arrived.
type Signalled struct{ Signal os.Signal }

func (s Signalled) Error() string {
	switch s.Signal {
	case syscall.SIGTERM:
		return "received SIGTERM"
	case syscall.SIGINT:
		return "received SIGINT"
	}
	return "received " + s.Signal.String()
}

// signalContext is ctx cancelled, with a Signalled cause, by the first
// SIGINT or SIGTERM; a second one ends the process at once, as signals do
// by default.
func signalContext(ctx context.Context) (context.Context, func()) {
	ctx, cancel := context.WithCancelCause(ctx)
	ch := make(chan os.Signal, 1)
	signal.Notify(ch, syscall.SIGINT, syscall.SIGTERM)
	done := make(chan struct{})
	go func() {
		select {
		case sig := <-ch:
			signal.Stop(ch)
			cancel(Signalled{sig})
		case <-done:
		}
	}()
	return ctx, func() {
		close(done)
		signal.Stop(ch)
		cancel(nil)
	}
}

type globals struct {
	configPath string
	stdout     io.Writer
	stderr     io.Writer
}

// NewRoot builds the command tree.
func NewRoot(stdout, stderr io.Writer) *cobra.Command {
	g := &globals{stdout: stdout, stderr: stderr}
	root := &cobra.Command{
		Use:   "outbox-relay",
		Short: "Relay transactional outbox rows to message brokers",
		Long: `outbox-relay reads the rows your services write into outbox tables in PostgreSQL, MySQL or
MariaDB and publishes them to Kafka, NATS JetStream, RabbitMQ, Redis Streams, MQTT or HTTP
webhooks: nothing committed is lost, events of one key arrive in order, and a poison message
or a broken destination never blocks the rest.`,
		Version:       buildinfo.Get().String(),
		SilenceUsage:  true,
		SilenceErrors: true,
	}
	root.SetVersionTemplate("{{.Version}}\n")
	root.SetOut(stdout)
	root.SetErr(stderr)
	root.PersistentFlags().StringVarP(&g.configPath, "config", "c", "relay.yaml", "configuration file")
	root.AddCommand(newRun(g), newMigrate(g), newCheck(g), newDLQ(g), newRetention(g), newOptimize(g), newDemo(g), newBench(g), newFakeKafka(g), newVersion(g), newStatus(g), newInbox(g))
	return root
}

// hideConfigFlag keeps the global --config out of the help of a command
// that needs no configuration.
func hideConfigFlag(cmd *cobra.Command) {
	cmd.SetHelpFunc(func(c *cobra.Command, args []string) {
		_ = c.Root().PersistentFlags().MarkHidden("config")
		c.Root().HelpFunc()(c, args)
	})
	cmd.SetUsageFunc(func(c *cobra.Command) error {
		_ = c.Root().PersistentFlags().MarkHidden("config")
		return c.Root().UsageFunc()(c)
	})
}

// load reads the configuration and builds the logger it asks for.
func (g *globals) load() (*config.Config, *slog.Logger, error) {
	cfg, err := config.Load(g.configPath)
	if err != nil {
		return nil, nil, err
	}
	return cfg, newLogger(g.stderr, cfg.Log), nil
}

func newLogger(w io.Writer, c config.Log) *slog.Logger {
	var level slog.Level
	_ = level.UnmarshalText([]byte(strings.ToUpper(c.Level)))
	opts := &slog.HandlerOptions{Level: level}
	if c.Format == "text" {
		return slog.New(slog.NewTextHandler(w, opts))
	}
	return slog.New(slog.NewJSONHandler(w, opts))
}

// actor names who runs an operator command, for the audit trail.
func actor() string {
	u := os.Getenv("USER")
	if u == "" {
		u = "unknown"
	}
	h, _ := os.Hostname()
	return u + "@" + h
}
