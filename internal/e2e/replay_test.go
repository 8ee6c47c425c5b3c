package e2e

import (
	"context"
	"testing"

	"github.com/outbox-relay/outbox-relay/internal/app"
	"github.com/outbox-relay/outbox-relay/internal/config"
	"github.com/outbox-relay/outbox-relay/internal/source/postgres"
)

// replayWithStore replays dead letters through the source's store, as
// `outbox-relay dlq replay` does.
func replayWithStore(t *testing.T, ctx context.Context, dsn string, cfg *config.Config, evs []postgres.FailedEvent) {
	t.Helper()
	a, err := app.Open(ctx, cfg, testLogger(t))
	if err != nil {
		t.Fatal(err)
	}
	defer a.Close()
	srcs, err := a.Resolve(ctx)
	if err != nil {
		t.Fatal(err)
	}
	for _, s := range srcs {
		var mine []postgres.FailedEvent
		for _, e := range evs {
			if e.Source == s.Name {
				mine = append(mine, e)
			}
		}
		if len(mine) == 0 {
			continue
		}
		if n, err := s.Replay(ctx, mine, "test"); err != nil || n != len(mine) {
			t.Fatalf("replay: %d of %d: %v", n, len(mine), err)
		}
	}
}
