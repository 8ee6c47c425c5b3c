-- Samples of each source for the console's charts (its last hour): written
-- by the replica that holds the source, read by any, so that every replica
-- serves the same charts.
-- +goose Up
CREATE TABLE source_samples (
  source TEXT NOT NULL,
  at TIMESTAMPTZ NOT NULL,
  pending BIGINT NOT NULL,
  oldest_seconds DOUBLE PRECISION NOT NULL,
  events_per_second DOUBLE PRECISION NOT NULL
);
CREATE INDEX source_samples_at ON source_samples (at);

-- +goose Down
DROP TABLE source_samples;
