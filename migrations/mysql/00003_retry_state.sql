-- Retry state for rows whose publish failed: attempts, backoff and the row's
-- order key (its first 500 characters), so a key waits while its head is
-- backing off. Kept here rather than in the application's table, which may
-- have no retry columns at all.
-- +goose Up
CREATE TABLE retry_state (
  source VARCHAR(255) NOT NULL,
  event_id VARCHAR(255) NOT NULL,
  order_key VARCHAR(500) NOT NULL DEFAULT '',
  attempts INT NOT NULL,
  next_attempt_at DATETIME(6) NOT NULL,
  last_error TEXT NOT NULL,
  first_failed_at DATETIME(6) NOT NULL DEFAULT CURRENT_TIMESTAMP(6),
  updated_at DATETIME(6) NOT NULL DEFAULT CURRENT_TIMESTAMP(6),
  PRIMARY KEY (source, event_id),
  KEY idx_retry_state_key (source, order_key, next_attempt_at)
) ENGINE=InnoDB DEFAULT CHARSET=utf8mb4 COLLATE=utf8mb4_bin;

-- +goose Down
DROP TABLE retry_state;
