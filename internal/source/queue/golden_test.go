package queue

import (
	"context"
	"path/filepath"
	"testing"

	"github.com/outbox-relay/outbox-relay/internal/layout"
	"github.com/outbox-relay/outbox-relay/internal/pgtest"
	"github.com/outbox-relay/outbox-relay/internal/source/postgres"
	"github.com/outbox-relay/outbox-relay/internal/source/sourcetest"
)

// TestGoldenSQL compares the statements of preset payment-queue's store
// with its golden file (go test -run GoldenSQL -args -update rewrites it).
func TestGoldenSQL(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	dsn, pool := pgtest.NewDB(t)
	if err := Migrate(ctx, dsn, "payments"); err != nil {
		t.Fatal(err)
	}
	tbl := postgres.Table{Schema: "payments", Name: "payment_outbox_pending"}
	merged, explicit, err := layout.Merge("payment-queue", layout.Spec{}, "")
	if err != nil {
		t.Fatal(err)
	}
	cols, err := postgres.Columns(ctx, pool, tbl)
	if err != nil {
		t.Fatal(err)
	}
	l, err := layout.Resolve(merged, explicit, tbl.String(), cols)
	if err != nil {
		t.Fatal(err)
	}
	archive, err := archiveTable(tbl, l.Queue.Archive)
	if err != nil {
		t.Fatal(err)
	}
	archCols, err := postgres.Columns(ctx, pool, archive)
	if err != nil {
		t.Fatal(err)
	}
	n, err := newNames(tbl, archive, l, cols, archCols)
	if err != nil {
		t.Fatal(err)
	}
	s := buildStatements(n, l, "outbox_relay")
	var f sourcetest.SQLFile
	f.Add("claim", s.claim)
	f.Add("claim under a lease", s.claimFenced)
	f.Add("outcome", s.outcome)
	f.Add("replay", s.replay)
	f.Add("reap", s.reap)
	f.Add("gauges", s.gauges)
	f.Add("gaps", s.gaps)
	f.Add("record stats", s.stats)
	sourcetest.Golden(t, filepath.Join(sourcetest.GoldenDir, "queue", "payment-queue.sql.golden"), f.String())
}
