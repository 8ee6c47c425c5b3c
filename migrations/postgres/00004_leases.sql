-- Leases: each shard (a source) is held by one relay process at a time. The
-- term grows on every change of owner and fences a previous owner.
-- +goose Up
CREATE TABLE leases (
  shard TEXT PRIMARY KEY,
  owner TEXT NOT NULL,
  term BIGINT NOT NULL DEFAULT 1,
  acquired_at TIMESTAMPTZ NOT NULL DEFAULT now(),
  expires_at TIMESTAMPTZ NOT NULL
);

-- +goose Down
DROP TABLE leases;
