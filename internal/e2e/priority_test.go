package e2e

import (
	"context"
	"fmt"
	"testing"
	"time"

	"github.com/twmb/franz-go/pkg/kfake"

	"github.com/outbox-relay/outbox-relay/internal/config"
	"github.com/outbox-relay/outbox-relay/internal/layout"
	"github.com/outbox-relay/outbox-relay/internal/pgtest"
)

// TestPriorityBetweenSources: two sources of one database, each with a
// backlog, wait for its connections; the one of higher priority claims
// first, so its backlog drains before the other has sent more than the
// batches it had claimed when they met.
func TestPriorityBetweenSources(t *testing.T) {
	t.Parallel()
	const rows, batch = 2000, 100
	dsn, pool := pgtest.NewDB(t)
	for i, tbl := range []string{"urgent", "bulk"} {
		// Ids apart: an event's id is its row's.
		pgtest.Exec(t, pool, fmt.Sprintf(`CREATE TABLE %s (id bigint GENERATED ALWAYS AS IDENTITY (START %d) PRIMARY KEY,
  k text NOT NULL, payload jsonb NOT NULL);
INSERT INTO %s (k, payload) SELECT '%s' || (i %% 50), '{}' FROM generate_series(1, %d) i`, tbl, 1+i*rows, tbl, tbl[:1], rows))
	}
	c := kafkaCluster(t, kfake.SeedTopics(1, "work"))
	col := collect(t, c.ListenAddrs(), "work")
	src := func(name string, priority int) config.Source {
		return config.Source{Name: name, Table: "public." + name, Topic: "work", BatchSize: batch, Pipeline: 2, Priority: priority,
			Layout: layout.Spec{ID: "id", Payload: "payload", Key: "{k}", OrderBy: "id", State: layout.State{Mode: "delete"}}}
	}
	cfg := baseConfig(dsn, c.ListenAddrs(), src("bulk", 0), src("urgent", 10))
	// Three connections: one place to claim (the others are the stats',
	// the leases' and the listener's).
	db := cfg.Databases["main"]
	db.MaxConns = 3
	cfg.Databases["main"] = db
	runApp(t, cfg)
	recs := col.waitDistinct(t, 2*rows, 60*time.Second)
	lastUrgent, bulkBefore := -1, 0
	for i, r := range recs {
		if r.Key[0] == 'u' {
			lastUrgent = i
		}
	}
	for _, r := range recs[:lastUrgent] {
		if r.Key[0] == 'b' {
			bulkBefore++
		}
	}
	t.Logf("the urgent backlog drained with %d of the bulk events sent before its last", bulkBefore)
	if bulkBefore > 3*batch {
		t.Errorf("%d bulk events went before the last urgent one: the higher priority did not claim first", bulkBefore)
	}
	waitFor(t, 10*time.Second, "every row deleted once delivered", func() (bool, string) {
		var left int
		err := pool.QueryRow(context.Background(), "SELECT (SELECT count(*) FROM urgent) + (SELECT count(*) FROM bulk)").Scan(&left)
		return err == nil && left == 0, fmt.Sprintf("%d rows left (%v)", left, err)
	})
}
