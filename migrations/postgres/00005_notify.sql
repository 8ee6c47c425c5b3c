-- The wake-up trigger function. A statement-level AFTER INSERT trigger on an
-- outbox table calls it with the channel name as its argument; the payload is
-- the table's schema-qualified name.
-- +goose Up
-- +goose StatementBegin
CREATE FUNCTION notify_outbox() RETURNS trigger LANGUAGE plpgsql AS $$
BEGIN
  PERFORM pg_notify(TG_ARGV[0], TG_TABLE_SCHEMA || '.' || TG_TABLE_NAME);
  RETURN NULL;
END
$$;
-- +goose StatementEnd

-- +goose Down
DROP FUNCTION notify_outbox() CASCADE;
