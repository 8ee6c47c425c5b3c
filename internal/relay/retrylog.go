package relay

import (
	"context"
	"log/slog"
	"strings"
	"sync"
	"time"

	"github.com/outbox-relay/outbox-relay/internal/source"
)

// retrySummaryEvery is how often a source that keeps retrying rows logs
// a summary of them.
const retrySummaryEvery = time.Minute

// retryLog logs, at info level, the rows of one source given another
// attempt: the first at once with its reason, then, while more follow, one
// summary a period (how many, and the last reason), so that a row retried
// for hours is visible without a line per attempt.
type retryLog struct {
	log   *slog.Logger
	every time.Duration
	now   func() time.Time

	mu sync.Mutex
	// quietUntil: retries before it are counted for the next summary;
	// the first one after it (with none counted) is logged at once.
	quietUntil time.Time
	count      int
	lastID     string
	lastReason string
}

func newRetryLog(log *slog.Logger, every time.Duration, now func() time.Time) *retryLog {
	return &retryLog{log: log, every: every, now: now}
}

// note records that the row with this id is tried again after failing
// its attempt (the attempts so far) with reason.
func (r *retryLog) note(id string, attempts int, reason string) {
	r.mu.Lock()
	defer r.mu.Unlock()
	now := r.now()
	if r.count == 0 && !now.Before(r.quietUntil) {
		r.log.Info("event failed; retrying", "event_id", id, "attempts", attempts, "reason", reason)
		r.quietUntil = now.Add(r.every)
		return
	}
	r.count++
	r.lastID, r.lastReason = id, reason
}

// tick logs the summary of the retries counted since the last line, once
// the period since it has passed.
func (r *retryLog) tick() {
	r.mu.Lock()
	defer r.mu.Unlock()
	now := r.now()
	if r.count == 0 || now.Before(r.quietUntil) {
		return
	}
	r.log.Info("events still failing; retrying", "retries", r.count, "period", r.every,
		"last_event_id", r.lastID, "last_reason", r.lastReason)
	r.count, r.lastID, r.lastReason = 0, "", ""
	r.quietUntil = now.Add(r.every)
}

// run calls tick on every tick until ctx ends.
func (r *retryLog) run(ctx context.Context, ticks <-chan time.Time) {
	for {
		select {
		case <-ctx.Done():
			return
		case <-ticks:
			r.tick()
		}
	}
}

// noteOutcome notes the rows of a batch's outcome given another attempt
// after a failure (not those held behind an earlier row of their key).
func (r *retryLog) noteOutcome(rows []source.Row, o source.Outcome) {
	for _, rt := range o.Retry {
		if rt.Index < 0 || rt.Index >= len(rows) || strings.HasPrefix(rt.Err, "held: an earlier row") {
			continue
		}
		r.note(rows[rt.Index].ID, rt.Attempts, rt.Err)
	}
}

// retryWatch is a store whose batches tell the retry log, once their
// outcome is recorded, which rows are tried again.
type retryWatch struct {
	source.Store
	log *retryLog
}

func (s retryWatch) Claim(ctx context.Context, limit int) (source.Batch, error) {
	b, err := s.Store.Claim(ctx, limit)
	if b == nil || err != nil {
		return b, err
	}
	return retryBatch{Batch: b, log: s.log}, nil
}

type retryBatch struct {
	source.Batch
	log *retryLog
}

func (b retryBatch) Complete(ctx context.Context, o source.Outcome) error {
	err := b.Batch.Complete(ctx, o)
	if err == nil && len(o.Retry) > 0 {
		b.log.noteOutcome(b.Rows(), o)
	}
	return err
}
