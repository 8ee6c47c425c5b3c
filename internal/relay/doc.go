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
// Each row has an order key (the partition key, else the key); rows without
// one have no order. The relay never publishes a row before every earlier
// row of its key has been published or dead-lettered. The database's part
// is the claim: rows in the layout's order, skipping locked rows and keys
// held in retry_state. Every in-memory decision (may this row go now, in
// which wave, what does this result mean for the row and its key) belongs to
// the order package: the worker registers each claimed batch with its order
// book, sends what the book lets go in the waves the plan gives, has the
// results judged, and tells the book how the commit ended.
//
// A row left pending through no fault of its own (behind an earlier row of
// its key, its sink unavailable, fenced) is held: written back with its
// attempts unchanged and its key held in retry_state for a while, so that
// the next claims skip the key until the batches claimed before have
// finished, and then take it from its first pending row.
//
// A sink that stalls holds no batch: each route's sink is wrapped so that a
// batch waits for its answer at most the sink's batch_wait, and the rows of a
// call still unanswered come back unavailable, so they are held like any
// other; the rest of the batch completes and claims go on. The call goes on
// in the background, within a budget per sink (see sink.Patient). A later
// row of a held key waits whatever its sink: the book fences it, and the
// claim skips the key.
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
