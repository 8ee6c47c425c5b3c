-- Replicas: every relay process registers here with a heartbeat, so that
-- each can take about its fair share of the shards (shards / live replicas).
-- A lease given up on purpose names its successor: the replica it was handed
-- to, which alone may take it for a short while. A replica's bell is the
-- connection that waits between its censuses: killing its query wakes it.
-- +goose Up
CREATE TABLE replicas (
  owner VARCHAR(255) NOT NULL PRIMARY KEY,
  started_at DATETIME(6) NOT NULL DEFAULT CURRENT_TIMESTAMP(6),
  expires_at DATETIME(6) NOT NULL,
  bell BIGINT NULL
) ENGINE=InnoDB DEFAULT CHARSET=utf8mb4 COLLATE=utf8mb4_bin;
ALTER TABLE leases ADD COLUMN successor VARCHAR(255) NOT NULL DEFAULT '';

-- +goose Down
ALTER TABLE leases DROP COLUMN successor;
DROP TABLE replicas;
