-- claim, ordering on
WITH c AS MATERIALIZED (
  SELECT o.ctid AS tid
  FROM "journey_matcher"."outbox" o
  LEFT JOIN "outbox_relay".retry_state r ON r.source = $1 AND r.event_id = o."id"::text
  WHERE o."published" = false
    AND (r.next_attempt_at IS NULL OR r.next_attempt_at <= now())
    AND NOT EXISTS (SELECT 1 FROM "outbox_relay".retry_state b WHERE b.source = $1 AND b.order_key = COALESCE(NULLIF(NULLIF(o."aggregate_id"::text, ''), ''), '') AND b.order_key <> '' AND b.next_attempt_at > now())
  ORDER BY o."created_at", COALESCE(r.tie, o.cmin::text::bigint), o."id"
  LIMIT $3
)
SELECT o."id"::text,
  o."payload"::text,
  NULLIF(o."event_type"::text, ''),
  NULLIF(NULLIF(o."aggregate_id"::text, ''), ''),
  NULL,
  COALESCE(NULLIF(NULLIF(o."aggregate_id"::text, ''), ''), ''),
  NULL,
  o."event_type"::text,
  o."aggregate_type"::text,
  o."aggregate_id"::text,
  o."created_at"::timestamptz,
  NULL::int,
  COALESCE(r.attempts, 0),
  o.ctid,
  COALESCE(r.tie, o.cmin::text::bigint),
  r.event_id IS NOT NULL
FROM "journey_matcher"."outbox" o
LEFT JOIN "outbox_relay".retry_state r ON r.source = $1 AND r.event_id = o."id"::text
WHERE o.ctid = ANY(ARRAY(SELECT tid FROM c))
  AND o."published" = false
ORDER BY o."created_at", COALESCE(r.tie, o.cmin::text::bigint), o."id"
LIMIT $2
FOR UPDATE OF o SKIP LOCKED;

-- claim under a lease, ordering on
WITH c AS MATERIALIZED (
  SELECT o.ctid AS tid
  FROM "journey_matcher"."outbox" o
  LEFT JOIN "outbox_relay".retry_state r ON r.source = $1 AND r.event_id = o."id"::text
  WHERE o."published" = false
    AND (r.next_attempt_at IS NULL OR r.next_attempt_at <= now())
    AND NOT EXISTS (SELECT 1 FROM "outbox_relay".retry_state b WHERE b.source = $1 AND b.order_key = COALESCE(NULLIF(NULLIF(o."aggregate_id"::text, ''), ''), '') AND b.order_key <> '' AND b.next_attempt_at > now())
  ORDER BY o."created_at", COALESCE(r.tie, o.cmin::text::bigint), o."id"
  LIMIT $3
)
SELECT o."id"::text,
  o."payload"::text,
  NULLIF(o."event_type"::text, ''),
  NULLIF(NULLIF(o."aggregate_id"::text, ''), ''),
  NULL,
  COALESCE(NULLIF(NULLIF(o."aggregate_id"::text, ''), ''), ''),
  NULL,
  o."event_type"::text,
  o."aggregate_type"::text,
  o."aggregate_id"::text,
  o."created_at"::timestamptz,
  NULL::int,
  COALESCE(r.attempts, 0),
  o.ctid,
  COALESCE(r.tie, o.cmin::text::bigint),
  r.event_id IS NOT NULL
FROM "journey_matcher"."outbox" o
LEFT JOIN "outbox_relay".retry_state r ON r.source = $1 AND r.event_id = o."id"::text
WHERE o.ctid = ANY(ARRAY(SELECT tid FROM c))
  AND o."published" = false
  AND EXISTS (SELECT 1 FROM "outbox_relay".leases l WHERE l.shard = $4 AND l.owner = $5 AND l.term = $6)
ORDER BY o."created_at", COALESCE(r.tie, o.cmin::text::bigint), o."id"
LIMIT $2
FOR UPDATE OF o SKIP LOCKED;

-- acknowledge
UPDATE "journey_matcher"."outbox" o SET "published" = true, "published_at" = statement_timestamp() WHERE o.ctid = ANY($1::tid[]);

-- mark published by id (exactly-once takeover)
UPDATE "journey_matcher"."outbox" o SET "published" = true, "published_at" = statement_timestamp() WHERE o."id" = ANY($1::text[]::uuid[]) AND o."published" = false;

-- dead-letter in the table
UPDATE "journey_matcher"."outbox" o SET "published" = true FROM unnest($1::text[], $2::text[], $3::int[]) AS u(id, reason, attempts) WHERE o."id" = u.id::uuid;

-- retry state
INSERT INTO "outbox_relay".retry_state AS t (source, event_id, order_key, attempts, next_attempt_at, last_error, tie)
SELECT $1, u.* FROM unnest($2::text[], $3::text[], $4::int[], $5::timestamptz[], $6::text[], $7::bigint[]) AS u
ON CONFLICT (source, event_id) DO UPDATE SET order_key = excluded.order_key, attempts = excluded.attempts,
  next_attempt_at = excluded.next_attempt_at, last_error = excluded.last_error, updated_at = now();

-- clear retry state
DELETE FROM "outbox_relay".retry_state WHERE source = $1 AND event_id = ANY($2::text[]);

-- insert dead letters
INSERT INTO "outbox_relay".failed_events (original_event_id, source, source_schema, source_table,
  event_type, topic, event_key, partition_key, headers, payload, payload_raw, row_data,
  failure_reason, failure_count, first_failed_at, last_failed_at)
SELECT u.id, $1, $2, $3, COALESCE(u.event_type, ''), u.topic, u.event_key, u.partition_key,
  CASE WHEN u.headers IS NOT NULL AND u.headers <> '' THEN u.headers::jsonb END,
  CASE WHEN u.is_json THEN convert_from(u.payload, 'UTF8')::jsonb END,
  CASE WHEN NOT u.is_json THEN u.payload END,
  to_jsonb(o), u.reason, u.attempts, COALESCE(r.first_failed_at, now()), now()
FROM unnest($4::text[], $5::text[], $6::text[], $7::text[], $8::text[], $9::text[], $10::bytea[], $11::bool[], $12::text[], $13::int[])
  AS u(id, event_type, topic, event_key, partition_key, headers, payload, is_json, reason, attempts)
JOIN "journey_matcher"."outbox" o ON o."id" = u.id::uuid
LEFT JOIN "outbox_relay".retry_state r ON r.source = $1 AND r.event_id = u.id;

-- record stats
WITH b AS (SELECT count(*), min(o."created_at")::timestamptz AS min FROM "journey_matcher"."outbox" o WHERE o."published" = false),
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

-- put back in the pending set (replay)
SET "published" = false, "published_at" = NULL;

-- claim, ordering off
WITH c AS MATERIALIZED (
  SELECT o.ctid AS tid
  FROM "journey_matcher"."outbox" o
  LEFT JOIN "outbox_relay".retry_state r ON r.source = $1 AND r.event_id = o."id"::text
  WHERE o."published" = false
    AND (r.next_attempt_at IS NULL OR r.next_attempt_at <= now())
  ORDER BY o."created_at", COALESCE(r.tie, o.cmin::text::bigint), o."id"
  LIMIT $3
)
SELECT o."id"::text,
  o."payload"::text,
  NULLIF(o."event_type"::text, ''),
  NULLIF(NULLIF(o."aggregate_id"::text, ''), ''),
  NULL,
  COALESCE(NULLIF(NULLIF(o."aggregate_id"::text, ''), ''), ''),
  NULL,
  o."event_type"::text,
  o."aggregate_type"::text,
  o."aggregate_id"::text,
  o."created_at"::timestamptz,
  NULL::int,
  COALESCE(r.attempts, 0),
  o.ctid,
  COALESCE(r.tie, o.cmin::text::bigint),
  r.event_id IS NOT NULL
FROM "journey_matcher"."outbox" o
LEFT JOIN "outbox_relay".retry_state r ON r.source = $1 AND r.event_id = o."id"::text
WHERE o.ctid = ANY(ARRAY(SELECT tid FROM c))
  AND o."published" = false
ORDER BY o."created_at", COALESCE(r.tie, o.cmin::text::bigint), o."id"
LIMIT $2
FOR UPDATE OF o SKIP LOCKED;

-- claim under a lease, ordering off
WITH c AS MATERIALIZED (
  SELECT o.ctid AS tid
  FROM "journey_matcher"."outbox" o
  LEFT JOIN "outbox_relay".retry_state r ON r.source = $1 AND r.event_id = o."id"::text
  WHERE o."published" = false
    AND (r.next_attempt_at IS NULL OR r.next_attempt_at <= now())
  ORDER BY o."created_at", COALESCE(r.tie, o.cmin::text::bigint), o."id"
  LIMIT $3
)
SELECT o."id"::text,
  o."payload"::text,
  NULLIF(o."event_type"::text, ''),
  NULLIF(NULLIF(o."aggregate_id"::text, ''), ''),
  NULL,
  COALESCE(NULLIF(NULLIF(o."aggregate_id"::text, ''), ''), ''),
  NULL,
  o."event_type"::text,
  o."aggregate_type"::text,
  o."aggregate_id"::text,
  o."created_at"::timestamptz,
  NULL::int,
  COALESCE(r.attempts, 0),
  o.ctid,
  COALESCE(r.tie, o.cmin::text::bigint),
  r.event_id IS NOT NULL
FROM "journey_matcher"."outbox" o
LEFT JOIN "outbox_relay".retry_state r ON r.source = $1 AND r.event_id = o."id"::text
WHERE o.ctid = ANY(ARRAY(SELECT tid FROM c))
  AND o."published" = false
  AND EXISTS (SELECT 1 FROM "outbox_relay".leases l WHERE l.shard = $4 AND l.owner = $5 AND l.term = $6)
ORDER BY o."created_at", COALESCE(r.tie, o.cmin::text::bigint), o."id"
LIMIT $2
FOR UPDATE OF o SKIP LOCKED;

-- retention: purge first batch
WITH c AS (
  SELECT o.ctid AS tid, o."id"::text AS id, ((o."published" = true AND o."id"::text IN (SELECT f.original_event_id FROM "outbox_relay".failed_events f WHERE f.source_schema = 'journey_matcher' AND f.source_table = 'outbox' AND f.replayed_at IS NULL))) AS dead
  FROM "journey_matcher"."outbox" o
  WHERE ((o."published" = true AND NOT o."id"::text IN (SELECT f.original_event_id FROM "outbox_relay".failed_events f WHERE f.source_schema = 'journey_matcher' AND f.source_table = 'outbox' AND f.replayed_at IS NULL)) OR (o."published" = true AND o."id"::text IN (SELECT f.original_event_id FROM "outbox_relay".failed_events f WHERE f.source_schema = 'journey_matcher' AND f.source_table = 'outbox' AND f.replayed_at IS NULL)))
    AND COALESCE(o."published_at"::timestamptz, o."created_at"::timestamptz) < now() - make_interval(secs => $1::float8)
  ORDER BY o."id"
  LIMIT $2
  FOR UPDATE OF o SKIP LOCKED
), d AS (
  DELETE FROM "journey_matcher"."outbox" o WHERE o.ctid = ANY(ARRAY(SELECT tid FROM c)) RETURNING 1
)
SELECT (SELECT count(*) FROM c), (SELECT count(*) FROM d), (SELECT count(*) FROM c WHERE dead), 0::bigint,
  (SELECT id FROM c ORDER BY id::uuid DESC LIMIT 1);

-- retention: purge next batch
WITH c AS (
  SELECT o.ctid AS tid, o."id"::text AS id, ((o."published" = true AND o."id"::text IN (SELECT f.original_event_id FROM "outbox_relay".failed_events f WHERE f.source_schema = 'journey_matcher' AND f.source_table = 'outbox' AND f.replayed_at IS NULL))) AS dead
  FROM "journey_matcher"."outbox" o
  WHERE ((o."published" = true AND NOT o."id"::text IN (SELECT f.original_event_id FROM "outbox_relay".failed_events f WHERE f.source_schema = 'journey_matcher' AND f.source_table = 'outbox' AND f.replayed_at IS NULL)) OR (o."published" = true AND o."id"::text IN (SELECT f.original_event_id FROM "outbox_relay".failed_events f WHERE f.source_schema = 'journey_matcher' AND f.source_table = 'outbox' AND f.replayed_at IS NULL)))
    AND COALESCE(o."published_at"::timestamptz, o."created_at"::timestamptz) < now() - make_interval(secs => $1::float8)
    AND o."id" > $3::text::uuid
  ORDER BY o."id"
  LIMIT $2
  FOR UPDATE OF o SKIP LOCKED
), d AS (
  DELETE FROM "journey_matcher"."outbox" o WHERE o.ctid = ANY(ARRAY(SELECT tid FROM c)) RETURNING 1
)
SELECT (SELECT count(*) FROM c), (SELECT count(*) FROM d), (SELECT count(*) FROM c WHERE dead), 0::bigint,
  (SELECT id FROM c ORDER BY id::uuid DESC LIMIT 1);

-- retention: purge count
SELECT count(*), count(*) FILTER (WHERE (o."published" = true AND o."id"::text IN (SELECT f.original_event_id FROM "outbox_relay".failed_events f WHERE f.source_schema = 'journey_matcher' AND f.source_table = 'outbox' AND f.replayed_at IS NULL)))
FROM "journey_matcher"."outbox" o
WHERE ((o."published" = true AND NOT o."id"::text IN (SELECT f.original_event_id FROM "outbox_relay".failed_events f WHERE f.source_schema = 'journey_matcher' AND f.source_table = 'outbox' AND f.replayed_at IS NULL)) OR (o."published" = true AND o."id"::text IN (SELECT f.original_event_id FROM "outbox_relay".failed_events f WHERE f.source_schema = 'journey_matcher' AND f.source_table = 'outbox' AND f.replayed_at IS NULL)))
    AND COALESCE(o."published_at"::timestamptz, o."created_at"::timestamptz) < now() - make_interval(secs => $1::float8);

-- retention: dead letters first batch
WITH c AS (
  SELECT f.id FROM "outbox_relay".failed_events f
  WHERE f.source_schema = $2 AND f.source_table = $3 AND f.replayed_at < now() - make_interval(secs => $1::float8)
  ORDER BY f.id
  LIMIT $4
  FOR UPDATE SKIP LOCKED
), a AS (
  DELETE FROM "outbox_relay".failed_event_audit x WHERE x.failed_event_id IN (SELECT id FROM c) RETURNING 1
), d AS (
  DELETE FROM "outbox_relay".failed_events f WHERE f.id IN (SELECT id FROM c) RETURNING 1
)
SELECT (SELECT count(*) FROM c), (SELECT count(*) FROM d), 0::bigint, (SELECT count(*) FROM a),
  (SELECT id::text FROM c ORDER BY id DESC LIMIT 1);

-- retention: retry state first batch
WITH c AS (
  SELECT r.event_id FROM "outbox_relay".retry_state r
  WHERE r.source = $1 AND NOT EXISTS (SELECT 1 FROM "journey_matcher"."outbox" o WHERE o."id" = r.event_id::uuid)
  ORDER BY r.event_id
  LIMIT $2
  FOR UPDATE OF r SKIP LOCKED
), d AS (
  DELETE FROM "outbox_relay".retry_state r WHERE r.source = $1 AND r.event_id IN (SELECT event_id FROM c) RETURNING 1
)
SELECT (SELECT count(*) FROM c), (SELECT count(*) FROM d), 0::bigint, 0::bigint,
  (SELECT event_id FROM c ORDER BY event_id DESC LIMIT 1);

