-- claim, ordering on
SELECT CAST(o.`id` AS CHAR CHARACTER SET utf8mb4),
  o.`payload_json`,
  NULLIF(CAST(o.`topic` AS CHAR CHARACTER SET utf8mb4), ''),
  NULLIF(NULLIF(CAST(o.`key` AS CHAR CHARACTER SET utf8mb4), ''), ''),
  NULLIF(CAST(o.`partition_key` AS CHAR CHARACTER SET utf8mb4), ''),
  COALESCE(NULLIF(NULLIF(CAST(o.`partition_key` AS CHAR CHARACTER SET utf8mb4), ''), ''), NULLIF(NULLIF(CAST(o.`key` AS CHAR CHARACTER SET utf8mb4), ''), ''), ''),
  NULLIF(o.`payload_headers`, ''),
  NULL,
  NULL,
  NULL,
  o.`created_at`,
  NULL,
  COALESCE((SELECT r.attempts FROM `outbox_relay`.retry_state r WHERE r.source = ? AND r.event_id = CAST(o.`id` AS CHAR CHARACTER SET utf8mb4) COLLATE utf8mb4_bin), o.`push_attempts`, 0),
  UTC_TIMESTAMP(6)
FROM `kafka_outbox` o FORCE INDEX (`PRIMARY`)
WHERE o.`push_completed_at` IS NULL AND o.`errored` = 0
  AND NOT EXISTS (SELECT 1 FROM `outbox_relay`.retry_state r WHERE r.source = ? AND r.event_id = CAST(o.`id` AS CHAR CHARACTER SET utf8mb4) COLLATE utf8mb4_bin AND r.next_attempt_at > UTC_TIMESTAMP(6))
  AND (o.`batch_id` IS NULL OR o.`push_started_at` IS NULL OR o.`push_started_at` < UTC_TIMESTAMP(6) - INTERVAL 60000000 MICROSECOND)
  AND NOT EXISTS (SELECT 1 FROM (SELECT COALESCE(NULLIF(NULLIF(CAST(f.`partition_key` AS CHAR CHARACTER SET utf8mb4), ''), ''), NULLIF(NULLIF(CAST(f.`key` AS CHAR CHARACTER SET utf8mb4), ''), ''), '') AS k, f.`id` AS ob, f.`id` AS id,
      (f.`batch_id` IS NOT NULL AND f.`push_started_at` IS NOT NULL AND f.`push_started_at` >= UTC_TIMESTAMP(6) - INTERVAL 60000000 MICROSECOND) AS fc
      FROM `kafka_outbox` f FORCE INDEX (`PRIMARY`)
      WHERE f.`push_completed_at` IS NULL AND f.`errored` = 0
        AND NOT EXISTS (SELECT 1 FROM `outbox_relay`.retry_state r WHERE r.source = ? AND r.event_id = CAST(f.`id` AS CHAR CHARACTER SET utf8mb4) COLLATE utf8mb4_bin AND r.next_attempt_at > UTC_TIMESTAMP(6))
        AND NOT EXISTS (SELECT 1 FROM `outbox_relay`.retry_state b WHERE b.source = ? AND b.order_key = LEFT(COALESCE(NULLIF(NULLIF(CAST(f.`partition_key` AS CHAR CHARACTER SET utf8mb4), ''), ''), NULLIF(NULLIF(CAST(f.`key` AS CHAR CHARACTER SET utf8mb4), ''), ''), ''), 500) COLLATE utf8mb4_bin AND b.order_key <> '' AND b.next_attempt_at > UTC_TIMESTAMP(6))
      ORDER BY f.`id`, f.`id`
      LIMIT ?) h
    WHERE h.fc AND h.k = COALESCE(NULLIF(NULLIF(CAST(o.`partition_key` AS CHAR CHARACTER SET utf8mb4), ''), ''), NULLIF(NULLIF(CAST(o.`key` AS CHAR CHARACTER SET utf8mb4), ''), ''), '') AND h.k <> '' AND (h.ob, h.id) < (o.`id`, o.`id`))
  AND (o.`id`, o.`id`) <= (SELECT w.ob, w.id FROM (SELECT COALESCE(NULLIF(NULLIF(CAST(f.`partition_key` AS CHAR CHARACTER SET utf8mb4), ''), ''), NULLIF(NULLIF(CAST(f.`key` AS CHAR CHARACTER SET utf8mb4), ''), ''), '') AS k, f.`id` AS ob, f.`id` AS id,
      (f.`batch_id` IS NOT NULL AND f.`push_started_at` IS NOT NULL AND f.`push_started_at` >= UTC_TIMESTAMP(6) - INTERVAL 60000000 MICROSECOND) AS fc
      FROM `kafka_outbox` f FORCE INDEX (`PRIMARY`)
      WHERE f.`push_completed_at` IS NULL AND f.`errored` = 0
        AND NOT EXISTS (SELECT 1 FROM `outbox_relay`.retry_state r WHERE r.source = ? AND r.event_id = CAST(f.`id` AS CHAR CHARACTER SET utf8mb4) COLLATE utf8mb4_bin AND r.next_attempt_at > UTC_TIMESTAMP(6))
        AND NOT EXISTS (SELECT 1 FROM `outbox_relay`.retry_state b WHERE b.source = ? AND b.order_key = LEFT(COALESCE(NULLIF(NULLIF(CAST(f.`partition_key` AS CHAR CHARACTER SET utf8mb4), ''), ''), NULLIF(NULLIF(CAST(f.`key` AS CHAR CHARACTER SET utf8mb4), ''), ''), ''), 500) COLLATE utf8mb4_bin AND b.order_key <> '' AND b.next_attempt_at > UTC_TIMESTAMP(6))
      ORDER BY f.`id`, f.`id`
      LIMIT ?) w ORDER BY w.ob DESC, w.id DESC LIMIT 1)
  AND NOT EXISTS (SELECT 1 FROM `outbox_relay`.retry_state b WHERE b.source = ? AND b.order_key = LEFT(COALESCE(NULLIF(NULLIF(CAST(o.`partition_key` AS CHAR CHARACTER SET utf8mb4), ''), ''), NULLIF(NULLIF(CAST(o.`key` AS CHAR CHARACTER SET utf8mb4), ''), ''), ''), 500) COLLATE utf8mb4_bin AND b.order_key <> '' AND b.next_attempt_at > UTC_TIMESTAMP(6))
ORDER BY o.`id`
LIMIT ?
FOR UPDATE SKIP LOCKED;

-- settle
SELECT 1 FROM `kafka_outbox` o FORCE INDEX (`PRIMARY`) WHERE o.`push_completed_at` IS NULL AND o.`errored` = 0 ORDER BY o.`id` LIMIT ? FOR UPDATE;

-- acknowledge: SET
`push_completed_at` = UTC_TIMESTAMP(6), `batch_id` = ?, `push_started_at` = ?;

-- dead-letter in the table: SET
`errored` = 1;

-- put back in the pending set (replay): SET
`errored` = 0, `push_completed_at` = NULL, `push_attempts` = 0, `batch_id` = NULL, `push_started_at` = NULL;

-- gauges
SELECT COUNT(*), TIMESTAMPDIFF(MICROSECOND, MIN(o.`created_at`), UTC_TIMESTAMP(6)), (SELECT COUNT(*) FROM `outbox_relay`.failed_events WHERE source = ? AND replayed_at IS NULL)
FROM `kafka_outbox` o WHERE o.`push_completed_at` IS NULL AND o.`errored` = 0;

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
  o.`payload_json`,
  NULLIF(CAST(o.`topic` AS CHAR CHARACTER SET utf8mb4), ''),
  NULLIF(NULLIF(CAST(o.`key` AS CHAR CHARACTER SET utf8mb4), ''), ''),
  NULLIF(CAST(o.`partition_key` AS CHAR CHARACTER SET utf8mb4), ''),
  COALESCE(NULLIF(NULLIF(CAST(o.`partition_key` AS CHAR CHARACTER SET utf8mb4), ''), ''), NULLIF(NULLIF(CAST(o.`key` AS CHAR CHARACTER SET utf8mb4), ''), ''), ''),
  NULLIF(o.`payload_headers`, ''),
  NULL,
  NULL,
  NULL,
  o.`created_at`,
  NULL,
  COALESCE((SELECT r.attempts FROM `outbox_relay`.retry_state r WHERE r.source = ? AND r.event_id = CAST(o.`id` AS CHAR CHARACTER SET utf8mb4) COLLATE utf8mb4_bin), o.`push_attempts`, 0),
  UTC_TIMESTAMP(6)
FROM `kafka_outbox` o FORCE INDEX (`PRIMARY`)
WHERE o.`push_completed_at` IS NULL AND o.`errored` = 0
  AND NOT EXISTS (SELECT 1 FROM `outbox_relay`.retry_state r WHERE r.source = ? AND r.event_id = CAST(o.`id` AS CHAR CHARACTER SET utf8mb4) COLLATE utf8mb4_bin AND r.next_attempt_at > UTC_TIMESTAMP(6))
  AND (o.`batch_id` IS NULL OR o.`push_started_at` IS NULL OR o.`push_started_at` < UTC_TIMESTAMP(6) - INTERVAL 60000000 MICROSECOND)
ORDER BY o.`id`
LIMIT ?
FOR UPDATE SKIP LOCKED;

-- retention: purge find
SELECT CAST(o.`id` AS CHAR CHARACTER SET utf8mb4), o.`errored` = 1
FROM `kafka_outbox` o FORCE INDEX (`PRIMARY`)
WHERE ((o.`push_completed_at` IS NOT NULL AND o.`errored` = 0) OR o.`errored` = 1)
  AND COALESCE(o.`push_completed_at`, o.`created_at`) < (UTC_TIMESTAMP(6) - INTERVAL ? MICROSECOND)
ORDER BY o.`id`
LIMIT ?;

-- retention: purge find after
SELECT CAST(o.`id` AS CHAR CHARACTER SET utf8mb4), o.`errored` = 1
FROM `kafka_outbox` o FORCE INDEX (`PRIMARY`)
WHERE ((o.`push_completed_at` IS NOT NULL AND o.`errored` = 0) OR o.`errored` = 1)
  AND COALESCE(o.`push_completed_at`, o.`created_at`) < (UTC_TIMESTAMP(6) - INTERVAL ? MICROSECOND)
  AND o.`id` > CAST(? AS UNSIGNED)
ORDER BY o.`id`
LIMIT ?;

-- retention: purge lock
SELECT CAST(o.`id` AS CHAR CHARACTER SET utf8mb4)
FROM `kafka_outbox` o FORCE INDEX (`PRIMARY`)
WHERE ((o.`push_completed_at` IS NOT NULL AND o.`errored` = 0) OR o.`errored` = 1) AND COALESCE(o.`push_completed_at`, o.`created_at`) < (UTC_TIMESTAMP(6) - INTERVAL ? MICROSECOND) AND o.`id` IN (%s)
FOR UPDATE SKIP LOCKED;

-- retention: purge delete
DELETE FROM `kafka_outbox` WHERE `id` = CAST(? AS UNSIGNED);

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

