-- The kafka_outbox table. Applications insert rows using the public columns
-- only (id, topic, payload_json, payload_headers, key, partition_key); every
-- other column is the relay's. IF NOT EXISTS adopts a table that the
-- original relay created with the same shape.

-- +goose Up
CREATE TABLE IF NOT EXISTS {{table}} (
  id bigserial PRIMARY KEY,
  batch_id varchar(36) NULL,
  push_started_at timestamp NULL,
  push_completed_at timestamp NULL,
  topic varchar(255) NOT NULL,
  payload_json text NOT NULL,
  payload_headers text NOT NULL DEFAULT '',
  push_attempts int NOT NULL DEFAULT 0,
  key varchar(255) NOT NULL DEFAULT '',
  partition_key varchar(255) NOT NULL DEFAULT '',
  errored smallint NOT NULL DEFAULT 0,
  error_reason text NOT NULL DEFAULT '',
  created_at timestamp NOT NULL DEFAULT now()
);

-- +goose Down
DROP TABLE IF EXISTS {{table}};
