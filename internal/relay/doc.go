// Package relay is the engine: for each source it claims batches of pending
// rows, publishes them through a sink, and completes each batch (acknowledge,
// schedule a retry, or dead-letter, per row) in the claim's transaction.
//
// # Pipeline
//
// A Worker serves one source. Its claimer takes a batch whenever one of
// Pipeline slots is free, so claiming, publishing and completing overlap.
// Every batch publishes in its own goroutine; one acker completes batches
// strictly in claim order and frees their slots.
//
// # Per-key order
//
// Each row has an order key (the partition key, else the key). The relay
// never publishes a row before every earlier row of its key has been
// published or dead-lettered:
//
//   - In the database, a row whose key has a row backing off in retry_state is
//     not claimed (the claim query's NOT EXISTS), and rows are claimed in the
//     layout's order.
//   - Within a batch, rows of one key bound for one partition go to the sink
//     in one Publish call, in order; the sink contract says a failure fails
//     every later message of that key in the call. Later rows that failed
//     only because an earlier one did are deferred, not counted as attempts,
//     so a poison row cannot spend its followers' budget. When a key's rows
//     change route (another topic, say), the later rows wait for the earlier
//     ones' results (waves), since no broker orders across partitions.
//   - Across batches in flight, a row whose key is held by an earlier batch
//     waits until that batch commits. If the earlier batch scheduled a retry
//     for the key (or failed to commit), the row is deferred: left pending,
//     untouched, for a later claim that the database filter then holds back.
//     Batches claimed before that commit check a per-key fence (the claim
//     sequence number at commit time), since their snapshot could not see it.
//
// Ordering can be turned off per source; then every row goes at once and
// only its own backoff holds it.
//
// # Failures
//
// A retryable failure schedules the row after an exponential backoff with
// jitter, persisted in retry_state; once the row's budget (its max_retries
// column, else the source's max_attempts) is spent, or at once for a
// terminal failure (too large, invalid JSON, no topic, unknown topic), the
// row moves to failed_events in the same transaction that takes it out of
// the pending set.
//
// # Shutdown
//
// Cancelling Run's context stops claiming. Batches in flight finish and
// commit within the shutdown timeout; after it, they are released (rolled
// back), which may publish their rows again later: delivery is at least once,
// and every message carries its event id.
package relay
