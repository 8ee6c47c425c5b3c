-- Per-source relay state: last poll, totals and lag, one row per source.
-- +goose Up
CREATE TABLE relay_state (
  id UUID PRIMARY KEY DEFAULT gen_random_uuid(),
  source TEXT NOT NULL UNIQUE,
  schema_name VARCHAR(100) NOT NULL,
  table_name VARCHAR(100) NOT NULL,
  last_poll_time TIMESTAMPTZ NOT NULL DEFAULT now(),
  last_published_event_id TEXT,
  total_events_published BIGINT NOT NULL DEFAULT 0,
  total_events_retried BIGINT NOT NULL DEFAULT 0,
  total_events_dead_lettered BIGINT NOT NULL DEFAULT 0,
  pending_events BIGINT NOT NULL DEFAULT 0,
  lag_seconds DOUBLE PRECISION NOT NULL DEFAULT 0,
  owner TEXT,
  created_at TIMESTAMPTZ NOT NULL DEFAULT now(),
  updated_at TIMESTAMPTZ NOT NULL DEFAULT now()
);
CREATE INDEX idx_relay_state_last_poll ON relay_state (last_poll_time);
CREATE INDEX idx_relay_state_schema ON relay_state (schema_name);

-- +goose Down
DROP TABLE relay_state;
