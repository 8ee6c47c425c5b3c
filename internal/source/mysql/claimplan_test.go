package mysql_test

import (
	"context"
	"encoding/json"
	"fmt"
	"slices"
	"strings"
	"testing"

	"github.com/outbox-relay/outbox-relay/internal/layout"
	"github.com/outbox-relay/outbox-relay/internal/source/mysql"
)

// TestClaimReadsABoundedWindow checks that a claim on a backlog whose
// statistics were never computed reads a number of the table's rows
// bounded by its batch (its window, for a claim that reads one), not by the
// backlog.
func TestClaimReadsABoundedWindow(t *testing.T) {
	t.Parallel()
	digits := "(SELECT 0 d UNION ALL SELECT 1 UNION ALL SELECT 2 UNION ALL SELECT 3 UNION ALL SELECT 4 " +
		"UNION ALL SELECT 5 UNION ALL SELECT 6 UNION ALL SELECT 7 UNION ALL SELECT 8 UNION ALL SELECT 9)"
	numbers := fmt.Sprintf("(SELECT a.d + 10 * b.d + 100 * c.d + 1000 * d.d + 10000 * e.d AS n FROM %s a, %s b, %s c, %s d, %s e) g",
		digits, digits, digits, digits, digits)
	const backlog, limit = 20_000, 500
	for _, tc := range []struct {
		preset, table, ddl, insert string
	}{
		{"kafka-outbox", "kafka_outbox", "", "INSERT INTO kafka_outbox (topic, payload_json, `key`) SELECT 't', '{}', CONCAT('k', n % 1000) FROM " + numbers +
			fmt.Sprintf(" WHERE n < %d", backlog)},
		{"delete", "outbox", "CREATE TABLE outbox (id BIGINT AUTO_INCREMENT PRIMARY KEY, topic VARCHAR(255), `key` VARCHAR(255), payload JSON NOT NULL)", "INSERT INTO outbox (topic, `key`, payload) SELECT 't', CONCAT('k', n % 1000), '{}' FROM " + numbers +
			fmt.Sprintf(" WHERE n < %d", backlog)},
		{"status", "outbox", `CREATE TABLE outbox (id CHAR(36) PRIMARY KEY, aggregate_id VARCHAR(100), event_type VARCHAR(100) NOT NULL DEFAULT 'e',
  aggregate_type VARCHAR(100) NOT NULL DEFAULT 'A', topic VARCHAR(100) NOT NULL, partition_key VARCHAR(100), payload JSON NOT NULL, headers JSON,
  status ENUM('pending', 'published', 'failed') NOT NULL DEFAULT 'pending', retry_count SMALLINT NOT NULL DEFAULT 0,
  max_retries SMALLINT NOT NULL DEFAULT 5, published_at DATETIME(6), created_at DATETIME(6) NOT NULL, KEY idx_pending (status, created_at))`, "INSERT INTO outbox (id, topic, aggregate_id, payload, created_at) " +
			"SELECT UUID(), 't', CONCAT('a', n % 1000), '{}', UTC_TIMESTAMP(6) - INTERVAL n MICROSECOND FROM " + numbers +
			fmt.Sprintf(" WHERE n < %d", backlog)},
	} {
		t.Run(tc.preset, func(t *testing.T) {
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
			e.exec(t, "ALTER TABLE "+tc.table+" STATS_PERSISTENT = 1, STATS_AUTO_RECALC = 0", tc.insert)
			st, _ := e.store(t, e.db, "plan", tc.table, tc.preset, layout.Spec{}, true)
			var plan string
			if err := e.db.QueryRowContext(ctx, "ANALYZE FORMAT=JSON "+mysql.ClaimSQL(st), mysql.ClaimArgs(st, limit)...).Scan(&plan); err != nil {
				t.Fatal(err)
			}
			if read := tableRows(t, plan, "o", "f"); read > 12*limit {
				t.Errorf("the claim read %d rows of a %d-row backlog; a claim of %d should read at most %d:\n%s", read, backlog, limit, 12*limit, plan)
			}
		})
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
