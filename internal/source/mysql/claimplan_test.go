package mysql_test

import (
	"context"
	"encoding/json"
	"fmt"
	"slices"
	"strings"
	"testing"

	"github.com/outbox-relay/outbox-relay/internal/source"
	"github.com/outbox-relay/outbox-relay/internal/source/mysql"
)

// TestClaimReadsABoundedWindow checks that a claim on a backlog whose
// statistics were never computed, in a table that keeps as many delivered
// rows, reads a number of the table's rows bounded by its batch (its
// window, for a claim that reads one), not by the backlog nor the history,
// with the indexes the relay picks for the table (ClaimIndex,
// PendingIndex). The claim of one bucket of a source split in 4
// (sources[].shards) reads its window over 4 times as many rows: it passes
// over the other buckets' rows.
func TestClaimReadsABoundedWindow(t *testing.T) {
	t.Parallel()
	digits := "(SELECT 0 d UNION ALL SELECT 1 UNION ALL SELECT 2 UNION ALL SELECT 3 UNION ALL SELECT 4 " +
		"UNION ALL SELECT 5 UNION ALL SELECT 6 UNION ALL SELECT 7 UNION ALL SELECT 8 UNION ALL SELECT 9)"
	numbers := fmt.Sprintf("(SELECT a.d + 10 * b.d + 100 * c.d + 1000 * d.d + 10000 * e.d AS n FROM %s a, %s b, %s c, %s d, %s e) g",
		digits, digits, digits, digits, digits)
	// Rows n < backlog are pending; the rows after them, as many, were
	// delivered (and are older: they sort first).
	const backlog, limit = 20_000, 500
	upTo := fmt.Sprintf(" WHERE n < %d", 2*backlog)
	pending := fmt.Sprintf("n < %d", backlog)
	for _, tc := range []struct {
		preset, table, ddl, insert string
	}{
		{"kafka-outbox", "kafka_outbox", "", "INSERT INTO kafka_outbox (topic, payload_json, `key`, push_completed_at) SELECT 't', '{}', CONCAT('k', n % 1000), " +
			"IF(" + pending + ", NULL, UTC_TIMESTAMP(6)) FROM " + numbers + upTo + " ORDER BY n DESC"},
		{"delete", "outbox", "CREATE TABLE outbox (id BIGINT AUTO_INCREMENT PRIMARY KEY, topic VARCHAR(255), `key` VARCHAR(255), payload JSON NOT NULL)",
			"INSERT INTO outbox (topic, `key`, payload) SELECT 't', CONCAT('k', n % 1000), '{}' FROM " + numbers + fmt.Sprintf(" WHERE n < %d", backlog)},
		{"status", "outbox", `CREATE TABLE outbox (id CHAR(36) PRIMARY KEY, aggregate_id VARCHAR(100), event_type VARCHAR(100) NOT NULL DEFAULT 'e',
  aggregate_type VARCHAR(100) NOT NULL DEFAULT 'A', topic VARCHAR(100) NOT NULL, partition_key VARCHAR(100), payload JSON NOT NULL, headers JSON,
  status ENUM('pending', 'published', 'failed') NOT NULL DEFAULT 'pending', retry_count SMALLINT NOT NULL DEFAULT 0,
  max_retries SMALLINT NOT NULL DEFAULT 5, published_at DATETIME(6), created_at DATETIME(6) NOT NULL, KEY idx_pending (status, created_at))`,
			"INSERT INTO outbox (id, topic, aggregate_id, payload, created_at, status) " +
				"SELECT UUID(), 't', CONCAT('a', n % 1000), '{}', UTC_TIMESTAMP(6) - INTERVAL n MICROSECOND, IF(" + pending + ", 'pending', 'published') FROM " + numbers + upTo},
		{"published-flag", "outbox", `CREATE TABLE outbox (id CHAR(36) NOT NULL PRIMARY KEY, aggregate_id CHAR(36) NOT NULL,
  aggregate_type VARCHAR(100) NOT NULL, event_type VARCHAR(100) NOT NULL, payload JSON NOT NULL, correlation_id CHAR(36) NOT NULL,
  created_at DATETIME(6) NOT NULL, published_at DATETIME(6) NULL, published BOOLEAN NOT NULL DEFAULT FALSE,
  KEY idx_outbox_unpublished (published, created_at))`,
			"INSERT INTO outbox (id, aggregate_id, aggregate_type, event_type, payload, correlation_id, created_at, published) " +
				"SELECT UUID(), CONCAT('a', n % 1000), 'j', 'e', '{}', UUID(), UTC_TIMESTAMP(6) - INTERVAL n MICROSECOND, NOT (" + pending + ") FROM " + numbers + upTo},
		{"prisma", "OutboxEvent", "CREATE TABLE `OutboxEvent` (`id` VARCHAR(191) NOT NULL, `tenantId` VARCHAR(191) NOT NULL, `eventType` VARCHAR(191) NOT NULL," +
			" `aggregateType` VARCHAR(191) NOT NULL, `aggregateId` VARCHAR(191) NOT NULL, `payload` JSON NOT NULL," +
			" `status` ENUM('pending', 'published', 'failed') NOT NULL DEFAULT 'pending', `error` TEXT NULL," +
			" `createdAt` DATETIME(3) NOT NULL DEFAULT CURRENT_TIMESTAMP(3), `publishedAt` DATETIME(3) NULL," +
			" INDEX `OutboxEvent_status_createdAt_idx`(`status`, `createdAt`), PRIMARY KEY (`id`))",
			"INSERT INTO `OutboxEvent` (`id`, `tenantId`, `eventType`, `aggregateType`, `aggregateId`, `payload`, `createdAt`, `status`) " +
				"SELECT UUID(), 't', 'e', 'a', CONCAT('a', n % 1000), '{}', UTC_TIMESTAMP(3) - INTERVAL n * 1000 MICROSECOND, IF(" + pending + ", 'pending', 'published') FROM " + numbers + upTo},
	} {
		for _, bc := range []struct {
			name     string
			bucket   source.Bucket
			ordering bool
		}{
			{"", source.Bucket{}, true},
			{"/bucket-1-of-4", source.Bucket{Index: 1, Count: 4}, true},
			{"/bucket-1-of-4/ordering-off", source.Bucket{Index: 1, Count: 4}, false},
		} {
			t.Run(tc.preset+bc.name, func(t *testing.T) {
				t.Parallel()
				ctx := context.Background()
				e := newEnv(t)
				var version string
				if err := e.db.QueryRowContext(ctx, "SELECT VERSION()").Scan(&version); err != nil {
					t.Fatal(err)
				}
				if !strings.Contains(strings.ToLower(version), "mariadb") {
					t.Skipf("reads the plan with MariaDB's ANALYZE FORMAT=JSON; the server is %s", version)
				}
				if tc.ddl == "" {
					if err := mysql.MigrateTable(ctx, e.dsn, mysql.Table{Name: tc.table}); err != nil {
						t.Fatal(err)
					}
				} else {
					e.exec(t, tc.ddl)
				}
				e.exec(t, "ALTER TABLE `"+tc.table+"` STATS_PERSISTENT = 1, STATS_AUTO_RECALC = 0", tc.insert)
				st := e.indexedBucketStore(t, "plan", tc.table, tc.preset, bc.bucket, bc.ordering)
				plans, err := mysql.ClaimPlans(ctx, st, limit)
				if err != nil {
					t.Fatal(err)
				}
				read := 0
				var shown []string
				for _, p := range plans {
					var plan string
					if err := e.db.QueryRowContext(ctx, "ANALYZE FORMAT=JSON "+p.SQL, p.Args...).Scan(&plan); err != nil {
						t.Fatal(err)
					}
					read += tableRows(t, plan, "o", "f")
					shown = append(shown, plan)
				}
				// A bucket's window (twice the limit) passes over the other
				// buckets' rows.
				most := 12*limit + (max(bc.bucket.Count, 1)-1)*2*limit
				if read > most {
					t.Errorf("the claim read %d rows of a %d-row backlog; a claim of %d should read at most %d:\n%s", read, backlog, limit, most, strings.Join(shown, "\n"))
				}
				t.Logf("the claim read %d rows", read)
			})
		}
	}
}

// tableRows sums the rows MariaDB's ANALYZE says were read from the tables
// named (as aliased in the statement) and from derived tables (a window
// read for every row considered is as costly as the table), every loop
// counted.
func tableRows(t *testing.T, plan string, names ...string) int {
	t.Helper()
	var doc any
	if err := json.Unmarshal([]byte(plan), &doc); err != nil {
		t.Fatalf("plan %s: %v", plan, err)
	}
	total := 0.0
	var walk func(v any)
	walk = func(v any) {
		switch v := v.(type) {
		case map[string]any:
			if name, ok := v["table_name"].(string); ok && (slices.Contains(names, name) || strings.HasPrefix(name, "<derived")) {
				rows, _ := v["r_rows"].(float64)
				loops, _ := v["r_loops"].(float64)
				total += rows * loops
			}
			for _, c := range v {
				walk(c)
			}
		case []any:
			for _, c := range v {
				walk(c)
			}
		}
	}
	walk(doc)
	return int(total)
}
