-- The position of a source read by capture cursor, kept with its relay state.
-- Every row whose inserting transaction is visible in position_done has been
-- handed on (delivered, scheduled for another attempt in retry_state, or
-- dead-lettered); when a batch could not take every row committed between
-- position_done and position_bound, the rows of that range up to the one the
-- position_after_* columns name (its transaction, order value, statement and
-- id) have been too. position_version counts the batches recorded: a batch
-- records its outcome only over the position it was claimed from.
-- +goose Up
ALTER TABLE relay_state
  ADD COLUMN position_done pg_snapshot,
  ADD COLUMN position_bound pg_snapshot,
  ADD COLUMN position_after_xid xid8,
  ADD COLUMN position_after_order TEXT,
  ADD COLUMN position_after_tie BIGINT,
  ADD COLUMN position_after_id TEXT,
  ADD COLUMN position_version BIGINT NOT NULL DEFAULT 0;

-- +goose Down
ALTER TABLE relay_state DROP COLUMN position_done, DROP COLUMN position_bound, DROP COLUMN position_after_xid,
  DROP COLUMN position_after_order, DROP COLUMN position_after_tie, DROP COLUMN position_after_id,
  DROP COLUMN position_version;
