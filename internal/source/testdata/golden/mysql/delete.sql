-- claim, ordering on
SELECT CAST(o.`id` AS CHAR CHARACTER SET utf8mb4),
  o.`payload`,
  NULLIF(CAST(o.`topic` AS CHAR CHARACTER SET utf8mb4), ''),
  NULLIF(NULLIF(CAST(o.`key` AS CHAR CHARACTER SET utf8mb4), ''), ''),
  NULL,
  COALESCE(NULLIF(NULLIF(CAST(o.`key` AS CHAR CHARACTER SET utf8mb4), ''), ''), ''),
  NULL,
  NULL,
  NULL,
  NULL,
  NULL,
  NULL,
  COALESCE((SELECT r.attempts FROM `outbox_relay`.retry_state r WHERE r.source = ? AND r.event_id = CAST(o.`id` AS CHAR CHARACTER SET utf8mb4) COLLATE utf8mb4_bin), 0),
  UTC_TIMESTAMP(6)
FROM `outbox` o FORCE INDEX (`PRIMARY`)
WHERE TRUE
  AND NOT EXISTS (SELECT 1 FROM `outbox_relay`.retry_state r WHERE r.source = ? AND r.event_id = CAST(o.`id` AS CHAR CHARACTER SET utf8mb4) COLLATE utf8mb4_bin AND r.next_attempt_at > UTC_TIMESTAMP(6))
  AND NOT EXISTS (SELECT 1 FROM `outbox_relay`.retry_state b WHERE b.source = ? AND b.order_key = LEFT(COALESCE(NULLIF(NULLIF(CAST(o.`key` AS CHAR CHARACTER SET utf8mb4), ''), ''), ''), 500) COLLATE utf8mb4_bin AND b.order_key <> '' AND b.next_attempt_at > UTC_TIMESTAMP(6))
ORDER BY o.`id`
LIMIT ?
FOR UPDATE SKIP LOCKED;

-- settle
SELECT 1 FROM `outbox` o FORCE INDEX (`PRIMARY`) WHERE TRUE ORDER BY o.`id` LIMIT ? FOR UPDATE;

-- gauges
SELECT COUNT(*), NULL, (SELECT COUNT(*) FROM `outbox_relay`.failed_events WHERE source = ? AND replayed_at IS NULL)
FROM `outbox` o WHERE TRUE;

-- record stats
INSERT INTO `outbox_relay`.relay_state (source, schema_name, table_name, last_poll_time, last_published_event_id,
  total_events_published, total_events_retried, total_events_dead_lettered, pending_events, lag_seconds, created_at, updated_at,
  owner, last_claim_at, events_per_second, sink_states)
VALUES (?, ?, ?, COALESCE(?, UTC_TIMESTAMP(6)), NULLIF(?, ''), ?, ?, ?, ?, ?, UTC_TIMESTAMP(6), UTC_TIMESTAMP(6), NULLIF(?, ''), ?, ?, ?)
ON DUPLICATE KEY UPDATE last_poll_time = VALUES(last_poll_time),
  owner = VALUES(owner), last_claim_at = VALUES(last_claim_at),
  events_per_second = VALUES(events_per_second), sink_states = VALUES(sink_states),
  last_published_event_id = COALESCE(VALUES(last_published_event_id), last_published_event_id),
  total_events_published = total_events_published + VALUES(total_events_published),
  total_events_retried = total_events_retried + VALUES(total_events_retried),
  total_events_dead_lettered = total_events_dead_lettered + VALUES(total_events_dead_lettered),
  pending_events = VALUES(pending_events), lag_seconds = VALUES(lag_seconds), updated_at = VALUES(updated_at);

-- claim, ordering off
SELECT CAST(o.`id` AS CHAR CHARACTER SET utf8mb4),
  o.`payload`,
  NULLIF(CAST(o.`topic` AS CHAR CHARACTER SET utf8mb4), ''),
  NULLIF(NULLIF(CAST(o.`key` AS CHAR CHARACTER SET utf8mb4), ''), ''),
  NULL,
  COALESCE(NULLIF(NULLIF(CAST(o.`key` AS CHAR CHARACTER SET utf8mb4), ''), ''), ''),
  NULL,
  NULL,
  NULL,
  NULL,
  NULL,
  NULL,
  COALESCE((SELECT r.attempts FROM `outbox_relay`.retry_state r WHERE r.source = ? AND r.event_id = CAST(o.`id` AS CHAR CHARACTER SET utf8mb4) COLLATE utf8mb4_bin), 0),
  UTC_TIMESTAMP(6)
FROM `outbox` o FORCE INDEX (`PRIMARY`)
WHERE TRUE
  AND NOT EXISTS (SELECT 1 FROM `outbox_relay`.retry_state r WHERE r.source = ? AND r.event_id = CAST(o.`id` AS CHAR CHARACTER SET utf8mb4) COLLATE utf8mb4_bin AND r.next_attempt_at > UTC_TIMESTAMP(6))
ORDER BY o.`id`
LIMIT ?
FOR UPDATE SKIP LOCKED;

-- retention: purge
-- the layout has no published-at or created-at column to date rows by;

-- retention: dead letters find
SELECT CAST(f.id AS CHAR), FALSE FROM `outbox_relay`.failed_events f
WHERE f.source_schema = COALESCE(DATABASE(), '') AND f.source_table = ? AND f.replayed_at < (UTC_TIMESTAMP(6) - INTERVAL ? MICROSECOND)
ORDER BY f.id
LIMIT ?;

-- retention: retry state find
SELECT r.event_id, FALSE FROM `outbox_relay`.retry_state r
WHERE r.source = ?
ORDER BY r.event_id
LIMIT ?;

