-- A replica's rings: every ring adds one before it kills the query of the
-- replica's bell, and the bell reads it before it sleeps, so that a ring
-- that came while the replica was not waiting (its KILL ended nothing) is
-- heard at its next wait.
-- +goose Up
ALTER TABLE replicas ADD COLUMN ring BIGINT NOT NULL DEFAULT 0;

-- +goose Down
ALTER TABLE replicas DROP COLUMN ring;
