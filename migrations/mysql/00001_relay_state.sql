-- Per-source relay state: last poll, totals and lag, one row per source.
-- Times are UTC (the relay's sessions run with time_zone '+00:00').
-- +goose Up
CREATE TABLE relay_state (
  id BIGINT UNSIGNED NOT NULL AUTO_INCREMENT PRIMARY KEY,
  source VARCHAR(255) NOT NULL,
  schema_name VARCHAR(100) NOT NULL,
  table_name VARCHAR(100) NOT NULL,
  last_poll_time DATETIME(6) NOT NULL DEFAULT CURRENT_TIMESTAMP(6),
  last_published_event_id VARCHAR(255) NULL,
  total_events_published BIGINT NOT NULL DEFAULT 0,
  total_events_retried BIGINT NOT NULL DEFAULT 0,
  total_events_dead_lettered BIGINT NOT NULL DEFAULT 0,
  pending_events BIGINT NOT NULL DEFAULT 0,
  lag_seconds DOUBLE NOT NULL DEFAULT 0,
  owner VARCHAR(255) NULL,
  created_at DATETIME(6) NOT NULL DEFAULT CURRENT_TIMESTAMP(6),
  updated_at DATETIME(6) NOT NULL DEFAULT CURRENT_TIMESTAMP(6),
  UNIQUE KEY uq_relay_state_source (source),
  KEY idx_relay_state_last_poll (last_poll_time),
  KEY idx_relay_state_schema (schema_name)
) ENGINE=InnoDB DEFAULT CHARSET=utf8mb4 COLLATE=utf8mb4_bin;

-- +goose Down
DROP TABLE relay_state;
