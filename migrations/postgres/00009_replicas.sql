-- Replicas: every relay process registers here with a heartbeat, so that
-- each can take about its fair share of the shards (shards / live replicas).
-- A lease given up on purpose names its successor: the replica it was handed
-- to, which alone may take it for a short while.
-- +goose Up
CREATE TABLE replicas (
  owner TEXT PRIMARY KEY,
  started_at TIMESTAMPTZ NOT NULL DEFAULT now(),
  expires_at TIMESTAMPTZ NOT NULL
);
ALTER TABLE leases ADD COLUMN successor TEXT NOT NULL DEFAULT '';

-- +goose Down
ALTER TABLE leases DROP COLUMN successor;
DROP TABLE replicas;
