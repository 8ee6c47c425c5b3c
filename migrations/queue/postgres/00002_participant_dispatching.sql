-- The relay's own: a participant's latest DISPATCHING attempt, which the
-- claim checks for an outcome (one dispatch in flight per participant).
-- +goose Up
CREATE INDEX ix_attempts_participant_dispatching ON payment_outbox_attempts (participant_id, claimed_at DESC)
  WHERE state = 'DISPATCHING';

-- +goose Down
DROP INDEX ix_attempts_participant_dispatching;
