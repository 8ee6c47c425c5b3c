-- The pending count (push_completed_at IS NULL) uses this index.

-- +goose Up
CREATE INDEX IF NOT EXISTS {{name}}_push_completed_at_idx ON {{table}} (push_completed_at);

-- +goose Down
DROP INDEX IF EXISTS {{name}}_push_completed_at_idx;
