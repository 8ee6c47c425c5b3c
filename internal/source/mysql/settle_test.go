package mysql_test

import (
	"context"
	"testing"
	"time"
)

// TestSettleWaitsForHeldRows: after a hand-over, Settle waits for the rows
// at the head of the backlog that another transaction (the previous
// holder's claim) still holds, and gives up after its timeout; once they
// are free it returns. Both claim forms: a table claimed through a window
// of its pending rows, and one claimed by its primary key.
func TestSettleWaitsForHeldRows(t *testing.T) {
	t.Parallel()
	for _, tc := range []struct{ preset, table, ddl, insert string }{
		{"status", "outbox", `CREATE TABLE outbox (id CHAR(36) PRIMARY KEY, aggregate_id VARCHAR(100), topic VARCHAR(100) NOT NULL,
  payload JSON NOT NULL, status ENUM('pending', 'published', 'failed') NOT NULL DEFAULT 'pending',
  published_at DATETIME(6), created_at DATETIME(6) NOT NULL, KEY idx_pending (status, created_at))`,
			"INSERT INTO outbox (id, topic, aggregate_id, payload, created_at) VALUES " +
				"(UUID(), 't', 'a', '{}', UTC_TIMESTAMP(6) - INTERVAL 2 SECOND), (UUID(), 't', 'b', '{}', UTC_TIMESTAMP(6) - INTERVAL 1 SECOND)"},
		{"delete", "outbox", "CREATE TABLE outbox (id BIGINT AUTO_INCREMENT PRIMARY KEY, topic VARCHAR(255), `key` VARCHAR(255), payload JSON NOT NULL)",
			"INSERT INTO outbox (topic, `key`, payload) VALUES ('t', 'a', '{}'), ('t', 'b', '{}')"},
	} {
		t.Run(tc.preset, func(t *testing.T) {
			t.Parallel()
			ctx := context.Background()
			e := newEnv(t)
			e.exec(t, tc.ddl, tc.insert)
			previous := e.indexedStore(t, "settle", tc.table, tc.preset)
			held, err := previous.Claim(ctx, 1)
			if err != nil || held == nil {
				t.Fatalf("claim: %v, %v", held, err)
			}
			next := e.indexedStore(t, "settle", tc.table, tc.preset)
			if err := next.Settle(ctx, 10, time.Second); err == nil {
				t.Fatal("Settle returned while another transaction held the first row; want it to wait and give up")
			}
			if err := held.Release(ctx); err != nil {
				t.Fatal(err)
			}
			if err := next.Settle(ctx, 10, time.Second); err != nil {
				t.Fatalf("Settle with every row free: %v", err)
			}
		})
	}
}
