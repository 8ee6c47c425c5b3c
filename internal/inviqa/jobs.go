package inviqa

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"net/http"
	"strings"
	"time"

	"github.com/jackc/pgx/v5"

	"github.com/outbox-relay/outbox-relay/internal/app"
	"github.com/outbox-relay/outbox-relay/internal/config"
	"github.com/outbox-relay/outbox-relay/internal/layout"
	// Registers the database drivers (postgres, mysql) that configurations name.
	_ "github.com/outbox-relay/outbox-relay/internal/source/all"
)

// CleanupAge is how long delivered rows are kept by the cleanup job, as by
// the original.
const CleanupAge = time.Hour

// sidecarTimeout bounds the request that stops the proxy sidecar.
const sidecarTimeout = 10 * time.Second

// RunJob runs in.Job (cleanup or optimize) on the table of every source,
// then asks the proxy sidecar to quit when in.SidecarProxyURL is set, even
// when the job failed, so that the job's pod ends either way.
func RunJob(ctx context.Context, in *config.Inviqa, log *slog.Logger) error {
	var errs []error
	for _, s := range in.Config.Sources {
		if err := runJob(ctx, in.Job, in.Config.Databases[s.Database], s, log); err != nil {
			errs = append(errs, fmt.Errorf("%s %s: %w", in.Job, s.Table, err))
		}
	}
	if in.SidecarProxyURL != "" {
		if err := QuitSidecar(ctx, in.SidecarProxyURL); err != nil {
			errs = append(errs, err)
		} else {
			log.Info("proxy sidecar asked to quit", "url", in.SidecarProxyURL)
		}
	}
	return errors.Join(errs...)
}

func runJob(ctx context.Context, job string, db config.Database, s config.Source, log *slog.Logger) error {
	if db.Driver != "postgres" {
		return fmt.Errorf("driver %s: not supported by this job yet", db.Driver)
	}
	schema, table, err := layout.ParseTableName(s.Table)
	if err != nil {
		return err
	}
	ident := pgx.Identifier{schema, table}.Sanitize()
	conn, err := pgx.Connect(ctx, db.DSN)
	if err != nil {
		return fmt.Errorf("connect: %w", err)
	}
	defer conn.Close(context.WithoutCancel(ctx))
	switch job {
	case config.InviqaJobCleanup:
		tag, err := conn.Exec(ctx, `DELETE FROM `+ident+` WHERE push_completed_at < now() - $1::interval`,
			fmt.Sprintf("%d seconds", int(CleanupAge.Seconds())))
		if err != nil {
			return fmt.Errorf("delete delivered rows: %w", err)
		}
		log.Info("deleted delivered rows", "source", s.Name, "rows", tag.RowsAffected(), "older_than", CleanupAge.String())
	case config.InviqaJobOptimize:
		if _, err := conn.Exec(ctx, `VACUUM (ANALYZE) `+ident); err != nil {
			return fmt.Errorf("vacuum: %w", err)
		}
		log.Info("vacuumed the table", "source", s.Name)
	default:
		return fmt.Errorf("unknown job %q", job)
	}
	return nil
}

// QuitSidecar asks the proxy sidecar at base (Istio's pilot-agent, or any
// proxy with the same endpoint) to quit: POST <base>/quitquitquit.
func QuitSidecar(ctx context.Context, base string) error {
	ctx, cancel := context.WithTimeout(ctx, sidecarTimeout)
	defer cancel()
	u := strings.TrimRight(base, "/") + "/quitquitquit"
	req, err := http.NewRequestWithContext(ctx, http.MethodPost, u, nil)
	if err != nil {
		return fmt.Errorf("quit sidecar: %w", err)
	}
	req.Header.Set("Content-Type", "text/plain")
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		return fmt.Errorf("quit sidecar: %w", err)
	}
	_ = resp.Body.Close()
	if resp.StatusCode >= 300 {
		return fmt.Errorf("quit sidecar: %s answered %s", u, resp.Status)
	}
	return nil
}

// Idle serves POLLING_DISABLED: it creates or upgrades the tables the relay
// manages, as the original did before idling, then relays nothing until ctx
// ends.
func Idle(ctx context.Context, in *config.Inviqa, log *slog.Logger) error {
	for name := range in.Config.Databases {
		if err := app.MigrateTables(ctx, in.Config, name); err != nil {
			return err
		}
	}
	log.Info("polling disabled: relaying nothing until stopped")
	<-ctx.Done()
	return nil
}
