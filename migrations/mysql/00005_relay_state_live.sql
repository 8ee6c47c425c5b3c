-- What `outbox-relay status` shows of a running source, written with its
-- periodic stats: the process that relays it, its latest successful claim,
-- its delivery rate over the last minute, and each sink's state.
-- +goose Up
ALTER TABLE relay_state
  ADD COLUMN last_claim_at DATETIME(6) NULL,
  ADD COLUMN events_per_second DOUBLE NOT NULL DEFAULT 0,
  ADD COLUMN sink_states TEXT NULL;

-- +goose Down
ALTER TABLE relay_state DROP COLUMN last_claim_at, DROP COLUMN events_per_second, DROP COLUMN sink_states;
