package layout

import (
	"sort"
)

// Presets are the built-in layouts for the outbox shapes teams already have.
// A source names one and may override any field; a new shape needs only
// config.
var Presets = map[string]Spec{
	// published-flag: a boolean `published` plus a published timestamp named
	// published_at or processed_at; events keyed by aggregate, topic by event
	// type (seed 000's service outboxes).
	"published-flag": {
		ID: "id", Payload: "payload", PayloadFormat: "json",
		Topic: "{event_type}", Key: "{aggregate_id}",
		EventType: "event_type", AggregateType: "aggregate_type", AggregateID: "aggregate_id",
		CreatedAt: "created_at", OrderBy: "created_at",
		State: State{Mode: "flag", Flag: "published", PublishedAt: []string{"published_at", "processed_at"}},
	},
	// status: a `status` column pending/published/failed with retry_count,
	// per-row max_retries, a topic column, partition_key and JSON headers
	// (seed 001).
	"status": {
		ID: "id", Payload: "payload", PayloadFormat: "json",
		Topic: "{topic}", Key: "{aggregate_id}", PartitionKey: "{partition_key}",
		Headers: "headers", EventType: "event_type", AggregateType: "aggregate_type", AggregateID: "aggregate_id",
		CreatedAt: "created_at", OrderBy: "created_at",
		RetryCount: "retry_count", MaxRetries: "max_retries",
		State: State{Mode: "status", Status: "status", Pending: "pending", Published: "published", Failed: "failed",
			PublishedAt: []string{"published_at"}},
	},
	// prisma: Prisma's quoted camelCase columns with a status enum and an
	// error column (seed 002's tenant."OutboxEvent").
	"prisma": {
		ID: "id", Payload: "payload", PayloadFormat: "json",
		Topic: "{eventType}", Key: "{aggregateId}",
		EventType: "eventType", AggregateType: "aggregateType", AggregateID: "aggregateId",
		CreatedAt: "createdAt", OrderBy: "createdAt", Error: "error",
		State: State{Mode: "status", Status: "status", Pending: "pending", Published: "published", Failed: "failed",
			PublishedAt: []string{"publishedAt"}},
	},
	// kafka-outbox: the kafka_outbox table the relay owns and migrates in the
	// application's database (seed 004): a JSON payload in a text column,
	// JSON headers as text ('' for none), topic, key and partition key
	// columns ('' for none; the partition key falls back to the key),
	// push_completed_at set on delivery, push_attempts counting failures,
	// errored and error_reason marking dead letters, and the claim recorded
	// in batch_id and push_started_at.
	"kafka-outbox": {
		ID: "id", Payload: "payload_json", PayloadFormat: "json",
		Topic: "{topic}", Key: "{key}", PartitionKey: "{partition_key}",
		Headers: "payload_headers", CreatedAt: "created_at", OrderBy: "id",
		RetryCount: "push_attempts", Error: "error_reason",
		State: State{Mode: "timestamp", PublishedAt: []string{"push_completed_at"},
			Errored: "errored", BatchID: "batch_id", ClaimedAt: "push_started_at"},
	},
	// payment-queue: seed 003's payment dispatch queue. The hot table
	// payment_outbox_pending is claimed by deleting rows, every attempt is
	// appended to payment_outbox_attempts, and a participant's rows are
	// dispatched one at a time in sequence_id order. The topic is the rail.
	"payment-queue": {
		ID: "outbox_id", Payload: "payload", PayloadFormat: "json",
		Topic: "{rail_type}", Key: "{participant_id}",
		EventType: "rail_type", AggregateID: "instruction_id",
		CreatedAt: "created_at", OrderBy: "sequence_id", RetryCount: "attempt_count",
		ExtraHeaders: map[string]string{"idempotency_key": "{idempotency_key}", "sequence_id": "{sequence_id}"},
		State: State{Mode: "queue", Queue: QueueSpec{
			Attempts: "payment_outbox_attempts", Participant: "participant_id", Sequence: "sequence_id",
			Due: "next_attempt_at", AttemptNo: "attempt_no", Status: "state",
			States: QueueStates{Dispatching: "DISPATCHING", Dispatched: "DISPATCHED", Retryable: "RETRYABLE",
				Failed: "FAILED", Zombie: "ZOMBIE_REQUEUE"},
			ClaimedAt: "claimed_at", CompletedAt: "completed_at", RailReference: "rail_reference", RailCode: "rail_code",
			ErrorCode: "error_code", ErrorMessage: "error_message", LatencyMS: "latency_ms", Channel: "outbox_pending",
		}},
	},
	// delete: rows are deleted once delivered; topic and key columns.
	"delete": {
		ID: "id", Payload: "payload", PayloadFormat: "json",
		Topic: "{topic}", Key: "{key}", OrderBy: "id",
		State: State{Mode: "delete"},
	},
}

// PresetNames lists the presets, sorted.
func PresetNames() []string {
	names := make([]string, 0, len(Presets))
	for n := range Presets {
		names = append(names, n)
	}
	sort.Strings(names)
	return names
}
