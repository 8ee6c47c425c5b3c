-- Samples of each source for the console's charts (its last hour): written
-- by the replica that holds the source, read by any, so that every replica
-- serves the same charts.
-- +goose Up
CREATE TABLE source_samples (
  source VARCHAR(255) NOT NULL,
  at DATETIME(6) NOT NULL,
  pending BIGINT NOT NULL,
  oldest_seconds DOUBLE NOT NULL,
  events_per_second DOUBLE NOT NULL,
  KEY source_samples_at (at)
) ENGINE=InnoDB DEFAULT CHARSET=utf8mb4 COLLATE=utf8mb4_bin;

-- +goose Down
DROP TABLE source_samples;
