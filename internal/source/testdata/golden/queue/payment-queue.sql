-- claim
WITH heads AS (
  SELECT DISTINCT ON ("participant_id") "outbox_id", "participant_id", "sequence_id", "next_attempt_at", "created_at" FROM "payments"."payment_outbox_pending" ORDER BY "participant_id", "sequence_id"
), cand AS (
  SELECT p."outbox_id" FROM heads h JOIN "payments"."payment_outbox_pending" p ON p."outbox_id" = h."outbox_id"
  WHERE h."next_attempt_at" <= now()
    AND COALESCE(h."sequence_id" <= (SELECT max(s."sequence_id") FROM "payments"."payment_outbox_attempts" s WHERE s."participant_id" = h."participant_id" AND s."state" IN ('DISPATCHED', 'FAILED')) + 1, true)
    AND NOT EXISTS (SELECT 1 FROM (SELECT a."outbox_id", a."attempt_no", a."state" FROM "payments"."payment_outbox_attempts" a WHERE a."participant_id" = h."participant_id" AND a."state" = 'DISPATCHING'
      ORDER BY a."claimed_at" DESC LIMIT 1) a WHERE a."state" = 'DISPATCHING' AND NOT EXISTS (SELECT 1 FROM "payments"."payment_outbox_attempts" o WHERE o."outbox_id" = a."outbox_id" AND o."attempt_no" = a."attempt_no" AND o."state" IN ('DISPATCHED', 'RETRYABLE', 'FAILED', 'ZOMBIE_REQUEUE')))
  ORDER BY h."next_attempt_at", h."created_at", h."sequence_id"
  LIMIT $1
  FOR UPDATE OF p SKIP LOCKED
), d AS (
  DELETE FROM "payments"."payment_outbox_pending" p USING cand WHERE p."outbox_id" = cand."outbox_id" RETURNING p.*
), ins AS (
  INSERT INTO "payments"."payment_outbox_attempts" ("outbox_id", "instruction_id", "participant_id", "sequence_id", "idempotency_key", "rail_type", "payload", "attempt_no", "state", "claimed_at")
  SELECT d."outbox_id", d."instruction_id", d."participant_id", d."sequence_id", d."idempotency_key", d."rail_type", d."payload", d."attempt_count" + 1, 'DISPATCHING', now() FROM d
  RETURNING "outbox_id", "attempt_no", "claimed_at"
)
SELECT d."outbox_id"::text,
  d."payload"::text,
  NULLIF(d."rail_type"::text, ''),
  NULLIF(NULLIF(d."participant_id"::text, ''), ''),
  NULL,
  COALESCE(NULLIF(NULLIF(d."participant_id"::text, ''), ''), ''),
  NULL,
  d."rail_type"::text,
  NULL::text,
  d."instruction_id"::text,
  d."created_at"::timestamptz,
  NULL::int,
  d."attempt_count"::int,
  NULL::tid,
  0::bigint,
  false,
  NULLIF(d."idempotency_key"::text, ''),
  NULLIF(d."sequence_id"::text, ''), ins."attempt_no"::text
FROM d JOIN ins ON ins."outbox_id" = d."outbox_id"
ORDER BY d."next_attempt_at", d."created_at", d."sequence_id";

-- claim under a lease
WITH heads AS (
  SELECT DISTINCT ON ("participant_id") "outbox_id", "participant_id", "sequence_id", "next_attempt_at", "created_at" FROM "payments"."payment_outbox_pending" ORDER BY "participant_id", "sequence_id"
), cand AS (
  SELECT p."outbox_id" FROM heads h JOIN "payments"."payment_outbox_pending" p ON p."outbox_id" = h."outbox_id"
  WHERE h."next_attempt_at" <= now()
    AND COALESCE(h."sequence_id" <= (SELECT max(s."sequence_id") FROM "payments"."payment_outbox_attempts" s WHERE s."participant_id" = h."participant_id" AND s."state" IN ('DISPATCHED', 'FAILED')) + 1, true)
    AND NOT EXISTS (SELECT 1 FROM (SELECT a."outbox_id", a."attempt_no", a."state" FROM "payments"."payment_outbox_attempts" a WHERE a."participant_id" = h."participant_id" AND a."state" = 'DISPATCHING'
      ORDER BY a."claimed_at" DESC LIMIT 1) a WHERE a."state" = 'DISPATCHING' AND NOT EXISTS (SELECT 1 FROM "payments"."payment_outbox_attempts" o WHERE o."outbox_id" = a."outbox_id" AND o."attempt_no" = a."attempt_no" AND o."state" IN ('DISPATCHED', 'RETRYABLE', 'FAILED', 'ZOMBIE_REQUEUE')))
    AND EXISTS (SELECT 1 FROM "outbox_relay".leases l WHERE l.shard = $2 AND l.owner = $3 AND l.term = $4)
  ORDER BY h."next_attempt_at", h."created_at", h."sequence_id"
  LIMIT $1
  FOR UPDATE OF p SKIP LOCKED
), d AS (
  DELETE FROM "payments"."payment_outbox_pending" p USING cand WHERE p."outbox_id" = cand."outbox_id" RETURNING p.*
), ins AS (
  INSERT INTO "payments"."payment_outbox_attempts" ("outbox_id", "instruction_id", "participant_id", "sequence_id", "idempotency_key", "rail_type", "payload", "attempt_no", "state", "claimed_at")
  SELECT d."outbox_id", d."instruction_id", d."participant_id", d."sequence_id", d."idempotency_key", d."rail_type", d."payload", d."attempt_count" + 1, 'DISPATCHING', now() FROM d
  RETURNING "outbox_id", "attempt_no", "claimed_at"
)
SELECT d."outbox_id"::text,
  d."payload"::text,
  NULLIF(d."rail_type"::text, ''),
  NULLIF(NULLIF(d."participant_id"::text, ''), ''),
  NULL,
  COALESCE(NULLIF(NULLIF(d."participant_id"::text, ''), ''), ''),
  NULL,
  d."rail_type"::text,
  NULL::text,
  d."instruction_id"::text,
  d."created_at"::timestamptz,
  NULL::int,
  d."attempt_count"::int,
  NULL::tid,
  0::bigint,
  false,
  NULLIF(d."idempotency_key"::text, ''),
  NULLIF(d."sequence_id"::text, ''), ins."attempt_no"::text
FROM d JOIN ins ON ins."outbox_id" = d."outbox_id"
ORDER BY d."next_attempt_at", d."created_at", d."sequence_id";

-- outcome
WITH u AS (
  SELECT * FROM unnest($4::text[], $5::int[], $6::text[], $7::text[], $8::text[], $9::text[], $10::text[], $11::int[],
    $12::timestamptz[], $13::timestamptz[], $14::text[], $15::text[], $16::text[], $17::bytea[], $18::bool[])
    AS u(id, n, state, ref, code, ecode, emsg, latency, due, created, event_type, topic, key, payload, is_json)
), rec AS (
  INSERT INTO "payments"."payment_outbox_attempts" ("outbox_id", "instruction_id", "participant_id", "sequence_id", "idempotency_key", "rail_type", "payload", "attempt_no", "state", "claimed_at", "completed_at", "rail_reference", "rail_code", "error_code", "error_message", "latency_ms")
  SELECT a."outbox_id", a."instruction_id", a."participant_id", a."sequence_id", a."idempotency_key", a."rail_type", a."payload", a."attempt_no", u.state, a."claimed_at", now(), NULLIF(u.ref, ''), NULLIF(u.code, ''), NULLIF(u.ecode, ''), NULLIF(u.emsg, ''), u.latency
  FROM u JOIN "payments"."payment_outbox_attempts" a ON a."outbox_id" = u.id::uuid AND a."attempt_no" = u.n AND a."state" = 'DISPATCHING'
  ON CONFLICT DO NOTHING
  RETURNING *
), back AS (
  INSERT INTO "payments"."payment_outbox_pending" ("outbox_id", "instruction_id", "participant_id", "sequence_id", "idempotency_key", "rail_type", "payload", "attempt_count", "next_attempt_at", "created_at")
  SELECT rec."outbox_id", rec."instruction_id", rec."participant_id", rec."sequence_id", rec."idempotency_key", rec."rail_type", rec."payload", rec."attempt_no", u.due, COALESCE(u.created, now()) FROM rec JOIN u ON rec."outbox_id" = u.id::uuid AND rec."attempt_no" = u.n
  WHERE rec."state" = 'RETRYABLE'
  ON CONFLICT DO NOTHING
), dead AS (
  INSERT INTO "outbox_relay".failed_events (original_event_id, source, source_schema, source_table, event_type, topic, event_key,
    payload, payload_raw, row_data, failure_reason, failure_count)
  SELECT u.id, $1, $2, $3, COALESCE(u.event_type, ''), u.topic, u.key,
    CASE WHEN u.is_json THEN convert_from(u.payload, 'UTF8')::jsonb END, CASE WHEN NOT u.is_json THEN u.payload END,
    to_jsonb(rec), COALESCE(u.emsg, ''), rec."attempt_no"
  FROM rec JOIN u ON rec."outbox_id" = u.id::uuid AND rec."attempt_no" = u.n
  WHERE rec."state" = 'FAILED'
)
SELECT rec."outbox_id"::text, rec."state"::text FROM rec;

-- replay
INSERT INTO "payments"."payment_outbox_pending" ("outbox_id", "instruction_id", "participant_id", "sequence_id", "idempotency_key", "rail_type", "payload", "attempt_count", "next_attempt_at")
SELECT a."outbox_id", a."instruction_id", a."participant_id", a."sequence_id", a."idempotency_key", a."rail_type", a."payload", a."attempt_no", now() FROM "payments"."payment_outbox_attempts" a WHERE a."outbox_id" = $1::text::uuid AND a."state" = 'FAILED'
ORDER BY a."attempt_no" DESC LIMIT 1
ON CONFLICT DO NOTHING;

-- reap
WITH z AS (
  SELECT a.* FROM "payments"."payment_outbox_attempts" a
  WHERE a."state" = 'DISPATCHING' AND NOT EXISTS (SELECT 1 FROM "payments"."payment_outbox_attempts" o WHERE o."outbox_id" = a."outbox_id" AND o."attempt_no" = a."attempt_no" AND o."state" IN ('DISPATCHED', 'RETRYABLE', 'FAILED', 'ZOMBIE_REQUEUE')) AND a."claimed_at" < now() - make_interval(secs => $1)
), rec AS (
  INSERT INTO "payments"."payment_outbox_attempts" ("outbox_id", "instruction_id", "participant_id", "sequence_id", "idempotency_key", "rail_type", "payload", "attempt_no", "state", "claimed_at", "completed_at", "error_code", "error_message")
  SELECT z."outbox_id", z."instruction_id", z."participant_id", z."sequence_id", z."idempotency_key", z."rail_type", z."payload", z."attempt_no", 'ZOMBIE_REQUEUE', z."claimed_at", now(), 'ZOMBIE_REQUEUE', 'no outcome within the zombie timeout: the dispatcher stopped' FROM z
  ON CONFLICT DO NOTHING
  RETURNING *
)
INSERT INTO "payments"."payment_outbox_pending" ("outbox_id", "instruction_id", "participant_id", "sequence_id", "idempotency_key", "rail_type", "payload", "attempt_count", "next_attempt_at", "created_at")
SELECT rec."outbox_id", rec."instruction_id", rec."participant_id", rec."sequence_id", rec."idempotency_key", rec."rail_type", rec."payload", rec."attempt_no", now(), (SELECT min(f."claimed_at") FROM "payments"."payment_outbox_attempts" f WHERE f."outbox_id" = rec."outbox_id") FROM rec
ON CONFLICT DO NOTHING
RETURNING "outbox_id"::text, "participant_id"::text, "sequence_id";

-- gauges
SELECT (SELECT count(*) FROM "payments"."payment_outbox_pending"), COALESCE((SELECT EXTRACT(EPOCH FROM now() - min("created_at")) FROM "payments"."payment_outbox_pending" WHERE "next_attempt_at" <= now()), 0),
  (SELECT count(*) FROM "payments"."payment_outbox_attempts" a WHERE a."state" = 'DISPATCHING' AND NOT EXISTS (SELECT 1 FROM "payments"."payment_outbox_attempts" o WHERE o."outbox_id" = a."outbox_id" AND o."attempt_no" = a."attempt_no" AND o."state" IN ('DISPATCHED', 'RETRYABLE', 'FAILED', 'ZOMBIE_REQUEUE')) AND a."claimed_at" < now() - make_interval(secs => $1));

-- gaps
SELECT p."participant_id"::text, p."sequence_id", m.last FROM (
  SELECT DISTINCT ON ("participant_id") "participant_id", "sequence_id" FROM "payments"."payment_outbox_pending" ORDER BY "participant_id", "sequence_id") p
CROSS JOIN LATERAL (SELECT max(s."sequence_id") AS last FROM "payments"."payment_outbox_attempts" s WHERE s."participant_id" = p."participant_id" AND s."state" IN ('DISPATCHED', 'FAILED')) m
WHERE p."sequence_id" > m.last + 1
ORDER BY 1;

-- record stats
WITH b AS (SELECT count(*), min(o."created_at")::timestamptz AS min FROM "payments"."payment_outbox_pending" o),
d AS (SELECT count(*) FROM "outbox_relay".failed_events WHERE source = $1 AND replayed_at IS NULL),
u AS (INSERT INTO "outbox_relay".relay_state AS t
  (source, schema_name, table_name, last_poll_time, last_published_event_id, total_events_published,
   total_events_retried, total_events_dead_lettered, pending_events, lag_seconds,
   owner, last_claim_at, events_per_second, sink_states)
  SELECT $1, $2, $3, COALESCE($9, now()), NULLIF($4, ''), $5, $6, $7, b.count, COALESCE(EXTRACT(EPOCH FROM now() - b.min), 0),
    NULLIF($8, ''), $9, $10, $11 FROM b
  ON CONFLICT (source) DO UPDATE SET last_poll_time = excluded.last_poll_time,
    owner = excluded.owner, last_claim_at = excluded.last_claim_at,
    events_per_second = excluded.events_per_second, sink_states = excluded.sink_states,
    last_published_event_id = COALESCE(excluded.last_published_event_id, t.last_published_event_id),
    total_events_published = t.total_events_published + excluded.total_events_published,
    total_events_retried = t.total_events_retried + excluded.total_events_retried,
    total_events_dead_lettered = t.total_events_dead_lettered + excluded.total_events_dead_lettered,
    pending_events = excluded.pending_events, lag_seconds = excluded.lag_seconds, updated_at = now())
SELECT b.count, b.min, d.count FROM b, d;

