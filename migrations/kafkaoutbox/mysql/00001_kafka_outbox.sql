-- The kafka_outbox table on MySQL 8 / MariaDB 10.6+. Applications insert
-- rows using the public columns only (id, topic, payload_json,
-- payload_headers, key, partition_key); every other column is the relay's.
-- IF NOT EXISTS adopts a table that the original relay created. TEXT
-- columns take their '' default as an expression: MySQL refuses a literal
-- default on TEXT, and the store reads '' and NULL headers alike.

-- +goose Up
CREATE TABLE IF NOT EXISTS {{table}} (
  id BIGINT UNSIGNED NOT NULL AUTO_INCREMENT PRIMARY KEY,
  batch_id VARCHAR(36) NULL,
  push_started_at DATETIME(6) NULL,
  push_completed_at DATETIME(6) NULL,
  topic VARCHAR(255) NOT NULL,
  payload_json LONGTEXT NOT NULL,
  payload_headers TEXT NOT NULL DEFAULT (''),
  push_attempts INT NOT NULL DEFAULT 0,
  `key` VARCHAR(255) NOT NULL DEFAULT '',
  partition_key VARCHAR(255) NOT NULL DEFAULT '',
  errored TINYINT NOT NULL DEFAULT 0,
  error_reason TEXT NOT NULL DEFAULT (''),
  created_at DATETIME(6) NOT NULL DEFAULT CURRENT_TIMESTAMP(6)
) ENGINE=InnoDB DEFAULT CHARSET=utf8mb4 COLLATE=utf8mb4_unicode_ci;

-- +goose Down
DROP TABLE IF EXISTS {{table}};
