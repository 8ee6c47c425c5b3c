-- Leases: each shard (a source) is held by one relay process at a time. The
-- term grows on every change of owner and fences a previous owner.
-- +goose Up
CREATE TABLE leases (
  shard VARCHAR(255) NOT NULL PRIMARY KEY,
  owner VARCHAR(255) NOT NULL,
  term BIGINT NOT NULL DEFAULT 1,
  acquired_at DATETIME(6) NOT NULL DEFAULT CURRENT_TIMESTAMP(6),
  expires_at DATETIME(6) NOT NULL
) ENGINE=InnoDB DEFAULT CHARSET=utf8mb4 COLLATE=utf8mb4_bin;

-- +goose Down
DROP TABLE leases;
