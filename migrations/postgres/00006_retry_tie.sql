-- The position of a row among the rows of its transaction (the command id of
-- the statement that inserted it), kept for a row backing off: the relay's
-- own update of the row's retry columns gives the row a new version, whose
-- command id is the relay's.
-- +goose Up
ALTER TABLE retry_state ADD COLUMN tie BIGINT;

-- +goose Down
ALTER TABLE retry_state DROP COLUMN tie;
