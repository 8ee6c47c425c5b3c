package mysql

import (
	"context"
	"fmt"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/outbox-relay/outbox-relay/internal/layout"
	"github.com/outbox-relay/outbox-relay/internal/mytest"
	"github.com/outbox-relay/outbox-relay/internal/source"
	"github.com/outbox-relay/outbox-relay/internal/source/sourcetest"
)

// goldenTables are the presets' tables as MySQL and MariaDB users make
// them, each at a fixed name so that the golden SQL does not depend on the
// test's database.
var goldenTables = []struct {
	preset, table, ddl string
}{
	{"delete", "outbox", fmt.Sprintf(deleteTable, "outbox")},
	{"published-flag", "outbox", `CREATE TABLE outbox (
  id CHAR(36) NOT NULL PRIMARY KEY,
  aggregate_id CHAR(36) NOT NULL,
  aggregate_type VARCHAR(100) NOT NULL,
  event_type VARCHAR(100) NOT NULL,
  payload JSON NOT NULL,
  created_at DATETIME(6) NOT NULL DEFAULT CURRENT_TIMESTAMP(6),
  published_at DATETIME(6) NULL,
  published BOOLEAN NOT NULL DEFAULT FALSE,
  KEY idx_unpublished (published, created_at)
)`},
	{"status", "outbox", fmt.Sprintf(statusTable, "outbox")},
	{"prisma", "OutboxEvent", "CREATE TABLE `OutboxEvent` (" + `
  id VARCHAR(191) NOT NULL PRIMARY KEY,
  ` + "`tenantId` VARCHAR(191) NOT NULL, `eventType` VARCHAR(191) NOT NULL, `aggregateType` VARCHAR(191) NOT NULL," + `
  ` + "`aggregateId` VARCHAR(191) NOT NULL, payload JSON NOT NULL," + `
  status ENUM('pending', 'published', 'failed') NOT NULL DEFAULT 'pending',
  error TEXT NULL,
  ` + "`createdAt` DATETIME(3) NOT NULL DEFAULT CURRENT_TIMESTAMP(3), `publishedAt` DATETIME(3) NULL," + `
  ` + "KEY `OutboxEvent_status_createdAt_idx` (status, `createdAt`)" + `
)`},
	{"kafka-outbox", "kafka_outbox", ""},
}

// TestGoldenSQL compares the statements each preset's store runs with the
// golden files (go test -run GoldenSQL -args -update rewrites them).
func TestGoldenSQL(t *testing.T) {
	t.Parallel()
	for _, g := range goldenTables {
		t.Run(g.preset, func(t *testing.T) {
			t.Parallel()
			_, dsn := mytest.NewDatabase(t, "golden")
			db, err := Open(dsn)
			if err != nil {
				t.Fatal(err)
			}
			t.Cleanup(func() { _ = db.Close() })
			ctx := context.Background()
			tbl := Table{Name: g.table}
			if g.ddl != "" {
				mytest.Exec(t, db, g.ddl)
			} else if err := MigrateTable(ctx, dsn, tbl); err != nil {
				t.Fatal(err)
			}
			merged, explicit, err := layout.Merge(g.preset, layout.Spec{}, "")
			if err != nil {
				t.Fatal(err)
			}
			cols, err := Columns(ctx, db, tbl)
			if err != nil {
				t.Fatal(err)
			}
			l, err := layout.Resolve(merged, explicit, tbl.String(), cols)
			if err != nil {
				t.Fatal(err)
			}
			index, err := ClaimIndex(ctx, db, tbl, l)
			if err != nil {
				t.Fatal(err)
			}
			pending, err := PendingIndex(ctx, db, tbl, l)
			if err != nil {
				t.Fatal(err)
			}
			st := &Store{db: db, opts: Options{Table: tbl, Layout: l}}
			sourcetest.Golden(t, filepath.Join(sourcetest.GoldenDir, "mysql", g.preset+".sql.golden"), goldenSQL(ctx, t, st, index, pending))
			sourcetest.Golden(t, filepath.Join(sourcetest.GoldenDir, "mysql", g.preset+".buckets.sql.golden"), goldenBucketSQL(l, tbl, index, pending))
		})
	}
}

// goldenSQL renders every statement of a store of layout l on table t.
func goldenSQL(ctx context.Context, t *testing.T, st *Store, index, pending string) string {
	const relayDB = "outbox_relay"
	l, tbl := st.opts.Layout, st.opts.Table
	var f sourcetest.SQLFile
	add := f.Add
	for _, ordering := range []bool{true, false} {
		s := buildStatements(l, tbl.String(), relayDB, ordering, 60*time.Second, index, pending, source.Bucket{}, nil)
		o := fmt.Sprintf("ordering %v", map[bool]string{true: "on", false: "off"}[ordering])
		add("claim, "+o, s.claim)
		add("claim's window, "+o, s.window)
		add("claim of the window's rows, "+o, s.claimIDs)
		if !ordering {
			break
		}
		add("settle", s.settle)
		add("acknowledge: SET", s.ackSets)
		add("dead-letter in the table: SET", s.deadSets)
		add("put back in the pending set (replay): SET", s.pendingValues)
		add("gauges", s.gauges)
		add("record stats", s.stats)
	}
	if sw, err := purgeSweep(l, tbl, relayDB, index, true, 3600e6); err == nil {
		add("retention: purge find", sw.find)
		add("retention: purge find after", sw.findAfter)
		add("retention: purge lock", sw.lock)
		add("retention: purge delete", strings.Join(sw.deletes, ";\n"))
	} else {
		add("retention: purge", "-- "+err.Error())
	}
	if sw, err := purgeSweep(l, tbl, relayDB, index, false, 3600e6); err == nil {
		add("retention: purge find, dead letters kept", sw.find)
	}
	fe := failedEventsSweep(tbl, relayDB, 3600e6)
	add("retention: dead letters find", fe.find)
	add("retention: dead letters find after", fe.findAfter)
	add("retention: dead letters lock", fe.lock)
	add("retention: dead letters delete", strings.Join(fe.deletes, ";\n"))
	add("retention: dead letters count beside", fe.besideOf)
	rs := retryStateSweep(l, tbl, relayDB, "src")
	add("retention: retry state find", rs.find)
	add("retention: retry state find after", rs.findAfter)
	add("retention: retry state lock", rs.lock)
	add("retention: retry state delete", strings.Join(rs.deletes, ";\n"))
	for _, df := range sourcetest.GoldenDLQFilters {
		q, args := listFailedSQL(relayDB, df.Filter)
		add(fmt.Sprintf("dead letters: list, %s (args %v)", df.Name, args), q)
	}
	s := buildStatements(l, tbl.String(), relayDB, true, 60*time.Second, index, pending, source.Bucket{}, nil)
	sets := s.pendingValues
	if reset, err := st.errorReset(ctx); err != nil {
		t.Fatal(err)
	} else if reset != "" {
		sets = strings.TrimPrefix(sets+", "+reset, ", ")
	}
	rq := buildReplaySQL(l, tbl, relayDB, "src", sets, st.tableColumns)
	restore, err := rq.Restore(ctx)
	if err != nil {
		t.Fatal(err)
	}
	add("dead letters: replay, reset the row", rq.Reset)
	add("dead letters: replay, is the row there", rq.Present)
	add("dead letters: replay, restore the deleted row", restore)
	add("dead letters: replay, clear retry state", rq.ClearRetry)
	add("dead letters: replay, mark replayed", rq.MarkReplayed)
	add("dead letters: replay, audit", rq.Audit)
	pq := buildPurgeDeadSQL(relayDB)
	add("dead letters: purge, lock", pq.Lock)
	add("dead letters: purge, delete", pq.Delete)
	add("dead letters: purge, audit", pq.Audit)
	return f.String()
}

// goldenBucketSQL renders the claims of bucket 1 of 4 of a source of layout
// l on table tbl (a whole source's claims are in goldenSQL, unchanged by
// buckets).
func goldenBucketSQL(l *layout.Layout, tbl Table, index, pending string) string {
	var f sourcetest.SQLFile
	for _, ordering := range []bool{true, false} {
		s := buildStatements(l, tbl.String(), "outbox_relay", ordering, 60*time.Second, index, pending, source.Bucket{Index: 1, Count: 4}, nil)
		o := fmt.Sprintf("ordering %v", map[bool]string{true: "on", false: "off"}[ordering])
		f.Add("claim's window, bucket 1/4, "+o, s.window)
		f.Add("claim of the window's rows, bucket 1/4, "+o, s.claimIDs)
	}
	return f.String()
}
