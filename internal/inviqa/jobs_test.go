package inviqa

import (
	"context"
	"log/slog"
	"net/http"
	"net/http/httptest"
	"net/url"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/outbox-relay/outbox-relay/internal/app"
	"github.com/outbox-relay/outbox-relay/internal/config"
	"github.com/outbox-relay/outbox-relay/internal/pgtest"
)

// inviqaEnv is the environment of an inviqa deployment on the database at dsn.
func inviqaEnv(t *testing.T, dsn string, extra ...string) []string {
	t.Helper()
	u, err := url.Parse(dsn)
	if err != nil {
		t.Fatal(err)
	}
	pass, _ := u.User.Password()
	return append([]string{"DB_DRIVER=postgres", "DB_HOST=" + u.Hostname(), "DB_PORT=" + u.Port(),
		"DB_USER=" + u.User.Username(), "DB_PASS=" + pass, "DB_NAME=" + strings.TrimPrefix(u.Path, "/")}, extra...)
}

// sidecar counts POSTs to /quitquitquit.
func sidecar(t *testing.T) (string, *atomic.Int32) {
	var quits atomic.Int32
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if r.Method == http.MethodPost && r.URL.Path == "/quitquitquit" {
			quits.Add(1)
			return
		}
		http.NotFound(w, r)
	}))
	t.Cleanup(srv.Close)
	return srv.URL, &quits
}

func TestCleanupDeletesRowsDeliveredOverAnHourAgo(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	dsn, pool := pgtest.NewDB(t)
	url, quits := sidecar(t)
	in, err := config.FromInviqa(inviqaEnv(t, dsn, "RUN_CLEANUP=true", "SIDECAR_PROXY_URL="+url), nil)
	if err != nil {
		t.Fatal(err)
	}
	if err := app.MigrateTables(ctx, in.Config, in.Config.Sources[0].Database); err != nil {
		t.Fatal(err)
	}
	_, err = pool.Exec(ctx, `INSERT INTO kafka_outbox (topic, payload_json, push_completed_at) VALUES
('old', '{}', now() - interval '2 hours'), ('recent', '{}', now() - interval '10 minutes'), ('pending', '{}', NULL)`)
	if err != nil {
		t.Fatal(err)
	}
	if err := RunJob(ctx, in, slog.New(slog.DiscardHandler)); err != nil {
		t.Fatal(err)
	}
	rows, err := pool.Query(ctx, `SELECT topic FROM kafka_outbox ORDER BY id`)
	if err != nil {
		t.Fatal(err)
	}
	var left []string
	for rows.Next() {
		var s string
		_ = rows.Scan(&s)
		left = append(left, s)
	}
	if strings.Join(left, ",") != "recent,pending" {
		t.Errorf("rows left %v, want recent,pending", left)
	}
	if quits.Load() != 1 {
		t.Errorf("sidecar asked to quit %d times, want 1", quits.Load())
	}
}

func TestFailedJobStillStopsTheSidecar(t *testing.T) {
	t.Parallel()
	dsn, _ := pgtest.NewDB(t) // no kafka_outbox: both jobs fail
	url, quits := sidecar(t)
	for _, job := range []string{"RUN_CLEANUP=true", "RUN_OPTIMIZE=true"} {
		in, err := config.FromInviqa(inviqaEnv(t, dsn, job, "SIDECAR_PROXY_URL="+url), nil)
		if err != nil {
			t.Fatal(err)
		}
		err = RunJob(context.Background(), in, slog.New(slog.DiscardHandler))
		if err == nil || !strings.Contains(err.Error(), "kafka_outbox") {
			t.Errorf("%s on a database without the table: %v", job, err)
		}
	}
	if quits.Load() != 2 {
		t.Errorf("sidecar asked to quit %d times, want 2", quits.Load())
	}
	if err := QuitSidecar(context.Background(), url+"/nowhere"); err == nil {
		t.Error("a sidecar answering 404 counts as stopped")
	}
}

func TestOptimizeVacuumsTheTable(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	dsn, pool := pgtest.NewDB(t)
	in, err := config.FromInviqa(inviqaEnv(t, dsn, "RUN_OPTIMIZE=1"), nil)
	if err != nil {
		t.Fatal(err)
	}
	if err := app.MigrateTables(ctx, in.Config, in.Config.Sources[0].Database); err != nil {
		t.Fatal(err)
	}
	if err := RunJob(ctx, in, slog.New(slog.DiscardHandler)); err != nil {
		t.Fatal(err)
	}
	var vacuumed *time.Time
	if err := pool.QueryRow(ctx, `SELECT last_vacuum FROM pg_stat_user_tables WHERE relname = 'kafka_outbox'`).Scan(&vacuumed); err != nil {
		t.Fatal(err)
	}
	if vacuumed == nil {
		t.Error("kafka_outbox was not vacuumed")
	}
}

func TestIdleMigratesThenWaits(t *testing.T) {
	t.Parallel()
	dsn, pool := pgtest.NewDB(t)
	in, err := config.FromInviqa(inviqaEnv(t, dsn, "POLLING_DISABLED=true"), nil)
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan error, 1)
	go func() { done <- Idle(ctx, in, slog.New(slog.DiscardHandler)) }()
	deadline := time.Now().Add(10 * time.Second)
	for {
		var n int
		_ = pool.QueryRow(context.Background(), `SELECT count(*) FROM pg_tables WHERE tablename = 'kafka_outbox'`).Scan(&n)
		if n == 1 {
			break
		}
		if time.Now().After(deadline) {
			t.Fatal("kafka_outbox not created")
		}
		time.Sleep(20 * time.Millisecond)
	}
	select {
	case err := <-done:
		t.Fatalf("idle returned before its context ended: %v", err)
	case <-time.After(100 * time.Millisecond):
	}
	cancel()
	if err := <-done; err != nil {
		t.Fatal(err)
	}
}
