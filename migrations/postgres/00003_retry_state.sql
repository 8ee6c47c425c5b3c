-- Retry state for rows whose publish failed: attempts, backoff and the row's
-- order key, so a key waits while its head is backing off. Kept here rather
-- than in the application's table, which may have no retry columns at all.
-- +goose Up
CREATE TABLE retry_state (
  source TEXT NOT NULL,
  event_id TEXT NOT NULL,
  order_key TEXT NOT NULL DEFAULT '',
  attempts INT NOT NULL,
  next_attempt_at TIMESTAMPTZ NOT NULL,
  last_error TEXT NOT NULL DEFAULT '',
  first_failed_at TIMESTAMPTZ NOT NULL DEFAULT now(),
  updated_at TIMESTAMPTZ NOT NULL DEFAULT now(),
  PRIMARY KEY (source, event_id)
);
CREATE INDEX idx_retry_state_key ON retry_state (source, order_key, next_attempt_at);

-- +goose Down
DROP TABLE retry_state;
