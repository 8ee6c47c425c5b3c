-- The claim reads the pending rows in id order and stops after a window of
-- them; this index holds only pending rows, in that order, so a claim costs
-- the same whatever the table's history and statistics. Built concurrently:
-- an adopted table may be large and in use.

-- +goose NO TRANSACTION
-- +goose Up
CREATE INDEX CONCURRENTLY IF NOT EXISTS {{name}}_pending_idx ON {{table}} (id) WHERE push_completed_at IS NULL AND errored = 0;

-- +goose Down
DROP INDEX CONCURRENTLY IF EXISTS {{name}}_pending_idx;
