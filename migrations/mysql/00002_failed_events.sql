-- Dead letters: events that spent their retry budget or failed terminally.
-- original_event_id is text because outbox ids are integers, UUIDs or CUIDs.
-- payload holds JSON payloads; payload_raw holds any that are not JSON.
-- row_data keeps the whole source row (bytes as base64) so a replay can
-- restore a deleted row.
-- +goose Up
CREATE TABLE failed_events (
  id BIGINT UNSIGNED NOT NULL AUTO_INCREMENT PRIMARY KEY,
  original_event_id VARCHAR(255) NOT NULL,
  source VARCHAR(255) NOT NULL,
  source_schema VARCHAR(100) NOT NULL,
  source_table VARCHAR(100) NOT NULL,
  event_type VARCHAR(200) NOT NULL DEFAULT '',
  topic TEXT NULL,
  event_key TEXT NULL,
  partition_key TEXT NULL,
  headers JSON NULL,
  payload JSON NULL,
  payload_raw LONGBLOB NULL,
  row_data JSON NULL,
  failure_reason TEXT NOT NULL,
  failure_count INT NOT NULL DEFAULT 1,
  first_failed_at DATETIME(6) NOT NULL DEFAULT CURRENT_TIMESTAMP(6),
  last_failed_at DATETIME(6) NOT NULL DEFAULT CURRENT_TIMESTAMP(6),
  replayed_at DATETIME(6) NULL,
  replay_count INT NOT NULL DEFAULT 0,
  created_at DATETIME(6) NOT NULL DEFAULT CURRENT_TIMESTAMP(6),
  KEY idx_failed_events_source (source_schema, source_table),
  KEY idx_failed_events_type (event_type),
  KEY idx_failed_events_first_failed (first_failed_at),
  KEY idx_failed_events_event (original_event_id),
  KEY idx_failed_events_open (source, replayed_at, created_at)
) ENGINE=InnoDB DEFAULT CHARSET=utf8mb4 COLLATE=utf8mb4_bin;

-- Every replay is recorded here and never deleted by the relay.
CREATE TABLE failed_event_audit (
  id BIGINT UNSIGNED NOT NULL AUTO_INCREMENT PRIMARY KEY,
  failed_event_id BIGINT UNSIGNED NOT NULL,
  action VARCHAR(50) NOT NULL,
  actor VARCHAR(255) NOT NULL,
  detail TEXT NOT NULL,
  at DATETIME(6) NOT NULL DEFAULT CURRENT_TIMESTAMP(6),
  KEY idx_failed_event_audit_event (failed_event_id)
) ENGINE=InnoDB DEFAULT CHARSET=utf8mb4 COLLATE=utf8mb4_bin;

-- +goose Down
DROP TABLE failed_event_audit;
DROP TABLE failed_events;
