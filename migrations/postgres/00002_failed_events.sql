-- Dead letters: events that spent their retry budget or failed terminally.
-- original_event_id is text because outbox ids are UUIDs, CUIDs or integers.
-- payload holds JSON payloads; payload_raw holds any that are not JSON.
-- row_data keeps the whole source row so a replay can restore a deleted row.
-- +goose Up
CREATE TABLE failed_events (
  id UUID PRIMARY KEY DEFAULT gen_random_uuid(),
  original_event_id TEXT NOT NULL,
  source TEXT NOT NULL,
  source_schema VARCHAR(100) NOT NULL,
  source_table VARCHAR(100) NOT NULL,
  event_type VARCHAR(200) NOT NULL DEFAULT '',
  topic TEXT,
  event_key TEXT,
  partition_key TEXT,
  headers JSONB,
  payload JSONB,
  payload_raw BYTEA,
  row_data JSONB,
  failure_reason TEXT NOT NULL,
  failure_count INT NOT NULL DEFAULT 1,
  first_failed_at TIMESTAMPTZ NOT NULL DEFAULT now(),
  last_failed_at TIMESTAMPTZ NOT NULL DEFAULT now(),
  replayed_at TIMESTAMPTZ,
  replay_count INT NOT NULL DEFAULT 0,
  created_at TIMESTAMPTZ NOT NULL DEFAULT now()
);
CREATE INDEX idx_failed_events_source ON failed_events (source_schema, source_table);
CREATE INDEX idx_failed_events_type ON failed_events (event_type);
CREATE INDEX idx_failed_events_first_failed ON failed_events (first_failed_at);
CREATE INDEX idx_failed_events_payload ON failed_events USING GIN (payload);
CREATE INDEX idx_failed_events_open ON failed_events (source, created_at) WHERE replayed_at IS NULL;

-- Every replay is recorded here and never deleted by the relay.
CREATE TABLE failed_event_audit (
  id BIGSERIAL PRIMARY KEY,
  failed_event_id UUID NOT NULL,
  action TEXT NOT NULL,
  actor TEXT NOT NULL,
  detail TEXT NOT NULL DEFAULT '',
  at TIMESTAMPTZ NOT NULL DEFAULT now()
);
CREATE INDEX idx_failed_event_audit_event ON failed_event_audit (failed_event_id);

-- +goose Down
DROP TABLE failed_event_audit;
DROP TABLE failed_events;
