-- The payment dispatch queue: a hot pending table whose rows are claimed by
-- deleting them, an append-only archive of every attempt and its outcome,
-- and a sequence per participant that dispatch follows strictly.
-- +goose Up
-- +goose StatementBegin
DO $$
BEGIN
  -- PostgreSQL 18 has uuidv7(); older servers get this one (RFC 9562:
  -- 48 bits of Unix milliseconds, version 7, variant, random bits).
  IF to_regprocedure('uuidv7()') IS NULL THEN
    CREATE FUNCTION uuidv7() RETURNS uuid LANGUAGE plpgsql VOLATILE AS $f$
    DECLARE
      b bytea := uuid_send(gen_random_uuid()); -- random, version 4, variant 10
    BEGIN
      b := overlay(b PLACING substring(int8send(floor(extract(epoch FROM clock_timestamp()) * 1000)::bigint) FROM 3)
        FROM 1 FOR 6);
      b := set_byte(b, 6, (get_byte(b, 6) & 15) | 112); -- version 7
      RETURN encode(b, 'hex')::uuid;
    END
    $f$;
  END IF;
END
$$;
-- +goose StatementEnd

CREATE TABLE participant_outbox_sequences (
  participant_id TEXT PRIMARY KEY,
  next_sequence_id BIGINT NOT NULL
);

-- bump_participant_outbox_seq allocates the participant's next sequence
-- number (1 first), atomically, in the caller's transaction.
-- +goose StatementBegin
CREATE FUNCTION bump_participant_outbox_seq(p_participant_id TEXT) RETURNS BIGINT LANGUAGE sql
  SET search_path FROM CURRENT AS $f$
  INSERT INTO participant_outbox_sequences AS s (participant_id, next_sequence_id) VALUES (p_participant_id, 1)
  ON CONFLICT (participant_id) DO UPDATE SET next_sequence_id = s.next_sequence_id + 1
  RETURNING next_sequence_id
$f$;
-- +goose StatementEnd

CREATE TABLE payment_outbox_pending (
  outbox_id UUID PRIMARY KEY DEFAULT uuidv7(),
  instruction_id TEXT NOT NULL,
  participant_id TEXT NOT NULL,
  sequence_id BIGINT NOT NULL,
  idempotency_key TEXT NOT NULL,
  rail_type TEXT NOT NULL,
  payload JSONB NOT NULL,
  attempt_count INT NOT NULL DEFAULT 0,
  next_attempt_at TIMESTAMPTZ NOT NULL DEFAULT NOW(),
  created_at TIMESTAMPTZ NOT NULL DEFAULT NOW(),
  CONSTRAINT payment_outbox_pending_participant_sequence UNIQUE (participant_id, sequence_id),
  CONSTRAINT payment_outbox_pending_idempotency UNIQUE (instruction_id, idempotency_key)
);
CREATE INDEX ix_pending_due ON payment_outbox_pending (next_attempt_at, created_at);
CREATE INDEX ix_pending_participant_due ON payment_outbox_pending (participant_id, next_attempt_at);

CREATE TABLE payment_outbox_attempts (
  attempt_id UUID PRIMARY KEY DEFAULT uuidv7(),
  outbox_id UUID NOT NULL,
  instruction_id TEXT NOT NULL,
  participant_id TEXT NOT NULL,
  sequence_id BIGINT NOT NULL,
  idempotency_key TEXT NOT NULL,
  rail_type TEXT NOT NULL,
  payload JSONB NOT NULL,
  attempt_no INT NOT NULL,
  state TEXT NOT NULL CHECK (state IN ('DISPATCHING', 'DISPATCHED', 'RETRYABLE', 'FAILED', 'ZOMBIE_REQUEUE')),
  claimed_at TIMESTAMPTZ NOT NULL DEFAULT NOW(),
  completed_at TIMESTAMPTZ,
  rail_reference TEXT,
  rail_code TEXT,
  error_code TEXT,
  error_message TEXT,
  latency_ms INT,
  created_at TIMESTAMPTZ NOT NULL DEFAULT NOW()
);
CREATE INDEX ix_attempts_by_outbox ON payment_outbox_attempts (outbox_id, claimed_at DESC);
CREATE INDEX ix_attempts_dispatching_age ON payment_outbox_attempts (claimed_at) WHERE state = 'DISPATCHING';
CREATE INDEX ix_attempts_by_instruction ON payment_outbox_attempts (instruction_id, claimed_at DESC);
-- The relay's own: a participant's settled sequence numbers (strict order).
CREATE INDEX ix_attempts_participant_settled ON payment_outbox_attempts (participant_id, sequence_id)
  WHERE state IN ('DISPATCHED', 'FAILED');
-- An attempt has one outcome.
CREATE UNIQUE INDEX ux_attempts_outcome ON payment_outbox_attempts (outbox_id, attempt_no)
  WHERE state IN ('DISPATCHED', 'RETRYABLE', 'FAILED', 'ZOMBIE_REQUEUE');

-- +goose StatementBegin
CREATE FUNCTION payment_outbox_notify() RETURNS trigger LANGUAGE plpgsql AS $f$
BEGIN
  PERFORM pg_notify('outbox_pending', 'new_work');
  RETURN NULL;
END
$f$;
-- +goose StatementEnd
CREATE TRIGGER payment_outbox_pending_notify AFTER INSERT ON payment_outbox_pending
  FOR EACH STATEMENT EXECUTE FUNCTION payment_outbox_notify();

-- +goose Down
DROP TABLE payment_outbox_attempts;
DROP TABLE payment_outbox_pending;
DROP FUNCTION payment_outbox_notify();
DROP FUNCTION bump_participant_outbox_seq(TEXT);
DROP TABLE participant_outbox_sequences;
