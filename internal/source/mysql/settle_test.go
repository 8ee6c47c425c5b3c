package mysql_test

import (
	"context"
	"strings"
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

// TestClaimAdvice: a table that keeps its delivered rows is told which index
// its claims lack (the state column, then the order column) until it has
// one; a table whose layout deletes its rows needs none.
func TestClaimAdvice(t *testing.T) {
	t.Parallel()
	e := newEnv(t)
	e.exec(t, `CREATE TABLE outbox (id CHAR(36) PRIMARY KEY, aggregate_id VARCHAR(100), topic VARCHAR(100) NOT NULL,
  payload JSON NOT NULL, status ENUM('pending', 'published', 'failed') NOT NULL DEFAULT 'pending',
  published_at DATETIME(6), created_at DATETIME(6) NOT NULL, KEY by_created (created_at))`,
		"CREATE TABLE plain (id BIGINT AUTO_INCREMENT PRIMARY KEY, topic VARCHAR(255), `key` VARCHAR(255), payload JSON NOT NULL)")
	advice := e.indexedStore(t, "advice", "outbox", "status").ClaimAdvice()
	if !strings.Contains(advice, "INDEX (`status`, `created_at`)") {
		t.Errorf("advice for a status table without an index of its pending rows = %q, want INDEX (`status`, `created_at`)", advice)
	}
	e.exec(t, "ALTER TABLE outbox ADD KEY pending (status, created_at)")
	if advice := e.indexedStore(t, "advice", "outbox", "status").ClaimAdvice(); advice != "" {
		t.Errorf("advice with the index = %q, want none", advice)
	}
	if advice := e.indexedStore(t, "advice", "plain", "delete").ClaimAdvice(); advice != "" {
		t.Errorf("advice for a table whose layout deletes its rows = %q, want none", advice)
	}
}
