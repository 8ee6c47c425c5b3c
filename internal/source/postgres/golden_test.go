package postgres

import (
	"context"
	"fmt"
	"path/filepath"
	"testing"
	"time"

	"github.com/outbox-relay/outbox-relay/internal/fixtures"
	"github.com/outbox-relay/outbox-relay/internal/layout"
	"github.com/outbox-relay/outbox-relay/internal/pgtest"
	"github.com/outbox-relay/outbox-relay/internal/source"
	"github.com/outbox-relay/outbox-relay/internal/source/sourcetest"
)

// goldenTables are the presets' tables as their teams made them, each at
// a fixed name so that the golden SQL does not depend on the test's
// database.
var goldenTables = []struct {
	preset string
	table  Table
	ddl    string
}{
	{"delete", Table{"public", "outbox"}, `CREATE TABLE public.outbox (id bigserial PRIMARY KEY, topic text, key text, payload jsonb NOT NULL)`},
	{"published-flag", Table{"journey_matcher", "outbox"}, fixtures.Seed000},
	{"status", Table{"public", "outbox"}, fixtures.Seed001},
	{"prisma", Table{"tenant", "OutboxEvent"}, fixtures.Seed002},
	{"kafka-outbox", Table{"public", "kafka_outbox"}, ""},
}

// TestGoldenSQL compares the statements each preset's store runs with the
// golden files (go test -run GoldenSQL -update rewrites them).
func TestGoldenSQL(t *testing.T) {
	t.Parallel()
	for _, g := range goldenTables {
		t.Run(g.preset, func(t *testing.T) {
			t.Parallel()
			dsn, pool := pgtest.NewDB(t)
			ctx := context.Background()
			if g.ddl != "" {
				pgtest.Exec(t, pool, g.ddl)
			} else if err := MigrateTable(ctx, dsn, g.table); err != nil {
				t.Fatal(err)
			}
			merged, explicit, err := layout.Merge(g.preset, layout.Spec{}, "")
			if err != nil {
				t.Fatal(err)
			}
			cols, err := Columns(ctx, pool, g.table)
			if err != nil {
				t.Fatal(err)
			}
			l, err := layout.Resolve(merged, explicit, g.table.String(), cols)
			if err != nil {
				t.Fatal(err)
			}
			sourcetest.Golden(t, filepath.Join(sourcetest.GoldenDir, "postgres", g.preset+".sql.golden"), goldenSQL(t, l, g.table))
			sourcetest.Golden(t, filepath.Join(sourcetest.GoldenDir, "postgres", g.preset+".buckets.sql.golden"), goldenBucketSQL(l, g.table))
		})
	}
}

// goldenSQL renders every statement of a store of layout l on table t.
func goldenSQL(t *testing.T, l *layout.Layout, tbl Table) string {
	const relaySchema = "outbox_relay"
	var f sourcetest.SQLFile
	add := f.Add
	add("claim transaction: settings", claimSettings)
	for _, ordering := range []bool{true, false} {
		s := buildStatements(l, tbl.String(), relaySchema, ordering, 60*time.Second, source.Bucket{}, nil)
		o := fmt.Sprintf("ordering %v", map[bool]string{true: "on", false: "off"}[ordering])
		add("claim, "+o, s.claim.plain)
		add("claim under a lease, "+o, s.claim.fenced)
		if !ordering {
			break
		}
		add("acknowledge", s.ack)
		add("mark published by id (exactly-once takeover)", s.markByID)
		add("dead-letter in the table", s.dead)
		add("retry in the table", s.retryRow)
		add("retry state", s.retryState)
		add("clear retry state", s.clearRetry)
		add("insert dead letters", s.insertDead)
		add("record stats", s.stats)
		add("put back in the pending set (replay)", "SET "+s.pendingValues)
	}
	if sw, err := purgeSweep(l, tbl, relaySchema, true, 3600); err == nil {
		add("retention: purge first batch", sw.first)
		add("retention: purge next batch", sw.next)
		add("retention: purge count", sw.count)
	} else {
		add("retention: purge", "-- "+err.Error())
	}
	fe := failedEventsSweep(tbl, relaySchema, 3600)
	add("retention: dead letters first batch", fe.first)
	add("retention: dead letters next batch", fe.next)
	add("retention: dead letters count", fe.count)
	rs := retryStateSweep(l, tbl, relaySchema, "src")
	add("retention: retry state first batch", rs.first)
	add("retention: retry state next batch", rs.next)
	add("retention: retry state count", rs.count)
	for _, df := range sourcetest.GoldenDLQFilters {
		q, args := listFailedSQL(relaySchema, df.Filter)
		add(fmt.Sprintf("dead letters: list, %s (args %v)", df.Name, args), q)
	}
	s := buildStatements(l, tbl.String(), relaySchema, true, 60*time.Second, source.Bucket{}, nil)
	rq := buildReplaySQL(l, tbl, relaySchema, "src", s.pendingValues)
	restore, _ := rq.Restore(context.Background())
	add("dead letters: replay, reset the row", rq.Reset)
	add("dead letters: replay, restore the deleted row", restore)
	add("dead letters: replay, clear retry state", rq.ClearRetry)
	add("dead letters: replay, mark replayed", rq.MarkReplayed)
	add("dead letters: replay, audit", rq.Audit)
	add("dead letters: replay, wake the relay", rq.Wake)
	pd := buildPurgeDeadSQL(relaySchema)
	add("dead letters: purge, lock", pd.Lock)
	add("dead letters: purge, delete", pd.Delete)
	add("dead letters: purge, audit", pd.Audit)
	return f.String()
}

// goldenBucketSQL renders the claims of bucket 1 of 4 of a source of layout
// l on table t (a whole source's claims are in goldenSQL, unchanged by
// buckets).
func goldenBucketSQL(l *layout.Layout, tbl Table) string {
	var f sourcetest.SQLFile
	f.Add("claim transaction of a bucket: settings", bucketClaimSettings)
	for _, ordering := range []bool{true, false} {
		s := buildStatements(l, tbl.String(), "outbox_relay", ordering, 60*time.Second, source.Bucket{Index: 1, Count: 4}, nil)
		o := fmt.Sprintf("ordering %v", map[bool]string{true: "on", false: "off"}[ordering])
		f.Add("claim of bucket 1/4, "+o, s.claim.plain)
		f.Add("claim of bucket 1/4 under a lease, "+o, s.claim.fenced)
	}
	return f.String()
}
