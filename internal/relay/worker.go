package relay

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"sync"
	"sync/atomic"
	"time"

	"github.com/outbox-relay/outbox-relay/internal/metrics"
	"github.com/outbox-relay/outbox-relay/internal/order"
	"github.com/outbox-relay/outbox-relay/internal/sink"
	"github.com/outbox-relay/outbox-relay/internal/source"
)

// Options configure the Worker of one source.
type Options struct {
	Name  string
	Store source.Store
	Sink  sink.Publisher
	// Owner names this process in relay_state (its lease owner).
	Owner string
	// SinkName names the source's own sink.
	SinkName string
	// Topic is the source's topic template (for the reason of a row that
	// renders none).
	Topic string
	// Headers are the headers the configuration adds (extra_headers).
	Headers []HeaderExtra
	// Schema, when set, checks the payloads sent to Sink.
	Schema Validator
	// Routes send the rows they match to other sinks; the first match wins.
	Routes       []Route
	BatchSize    int
	Pipeline     int  // batches in flight
	Ordering     bool // per-key order
	MaxAttempts  int  // budget for rows without their own
	Backoff      Backoff
	PollMin      time.Duration
	PollMax      time.Duration
	ValidateJSON bool
	// Wake, when not nil, signals that rows may have arrived (NOTIFY).
	Wake <-chan struct{}
	// Gate, when not nil, is where each batch waits for its place among
	// the claims of its database (see Scheduler), from its claim to its
	// completion.
	Gate Gate
	// Txn, when set, makes each batch one transaction of the sink
	// (delivery exactly_once); Sink and every route's sink publish into it.
	Txn Transactor
	// Recover, when set, runs before the first claim and is retried until
	// it succeeds: exactly-once's takeover (fence the previous holder, mark
	// what its committed transactions delivered).
	Recover func(ctx context.Context) error
	// PollFallback caps the wait between claims of an idle source that
	// Wake wakes (default 10 × PollMax): the safety net.
	PollFallback time.Duration
	// Debounce is how long a wake-up waits for more before the claim, so
	// that a burst of notifications costs one claim.
	Debounce time.Duration
	// ShutdownTimeout bounds how long batches in flight may finish after
	// Run's context is cancelled.
	ShutdownTimeout time.Duration
	// StatsInterval is how often relay_state and the backlog gauges are
	// refreshed. Default 15s.
	StatsInterval time.Duration
	// MaxOldestPending and MaxClaimFailure are the readiness thresholds
	// (see Check); zero: not checked.
	MaxOldestPending time.Duration
	MaxClaimFailure  time.Duration
	Metrics          *metrics.SourceMetrics
	Logger           *slog.Logger
}

// Worker relays one source. Create it with NewWorker and call Run once.
type Worker struct {
	o       Options
	log     *slog.Logger
	targets []target // [0] the source's sink, then one per route

	// book decides which rows may go, across the batches in flight.
	book *order.Book
	// stopClaims ends the claim loop (set by Run).
	stopClaims context.CancelFunc

	statsMu   sync.Mutex
	stats     source.Stats // not yet recorded
	delivered int64        // events delivered since the start
	pending   int64        // the backlog: the stats' count, less what batches took since
	taken     int64        // events batches took out of the pending set, since the start
	samples   []deliveredAt
	lastErr   atomic.Pointer[error]
	lastPoll  atomic.Int64 // unix nanos of the latest successful claim query
	// oldestAge is the age of the oldest pending event (nanoseconds) as the
	// latest claim or stats refresh saw it.
	oldestAge atomic.Int64
	started   time.Time
	// receipts says the store records what the destination answered.
	receipts bool
	// takeover is the latest failure of Options.Recover, nil once it
	// succeeded (or before its first try).
	takeover atomic.Pointer[error]
	// retries logs the rows given another attempt (see retryLog).
	retries *retryLog
	// freed is signalled when a batch completes.
	freed chan struct{}
	// lastTxn, per producer, is closed when the producer's latest batch's
	// transaction ends (delivery exactly_once); turns counts the batches.
	lastTxn []<-chan struct{}
	turns   uint64
}

// NewWorker checks opts and builds a worker.
func NewWorker(o Options) *Worker {
	if o.Logger == nil {
		o.Logger = slog.New(slog.DiscardHandler)
	}
	if o.Pipeline < 1 {
		o.Pipeline = 1
	}
	if o.StatsInterval <= 0 {
		o.StatsInterval = 15 * time.Second
	}
	if o.PollMin <= 0 {
		o.PollMin = 50 * time.Millisecond
	}
	if o.PollMax < o.PollMin {
		o.PollMax = o.PollMin
	}
	now := time.Now()
	rt, ok := o.Store.(source.ReceiptTaker)
	retries := newRetryLog(o.Logger.With("source", o.Name), retrySummaryEvery, time.Now)
	o.Store = retryWatch{Store: o.Store, log: retries}
	return &Worker{
		retries:  retries,
		receipts: ok && rt.TakesReceipts(),
		freed:    make(chan struct{}, 1),
		o:        o,
		log:      o.Logger.With("source", o.Name),
		targets:  newTargets(o),
		book:     order.NewBook(),
		started:  now,
		samples:  []deliveredAt{{at: now}},
	}
}

func closedChan() <-chan struct{} {
	c := make(chan struct{})
	close(c)
	return c
}

// Healthy is Check now: nil while the source makes progress.
func (w *Worker) Healthy() error { return w.Check(time.Now()) }

// Check says why the source is stuck at now, or nil: its claims have all
// failed for longer than MaxClaimFailure, its exactly-once takeover has
// failed for that long, it has had no successful claim that long after its
// start, or its oldest pending event is older than MaxOldestPending.
func (w *Worker) Check(now time.Time) error {
	c := w.Condition(now)
	if c.Starting {
		return nil
	}
	return c.Err
}

// Condition is what a worker knows of its source's progress at a time.
type Condition struct {
	// Starting is true while the worker has had no successful claim yet
	// and its grace (MaxClaimFailure) since its start has not run out.
	Starting bool
	// Cause names why the source does not relay (one of the Cause
	// constants), "" when it does; Err says it in words.
	Cause string
	Err   error
}

// Causes of a source not relaying, as a worker sees them.
const (
	CauseTakeover = "takeover_failing"
	CauseClaims   = "claims_failing"
	CauseBacklog  = "backlog_too_old"
	CauseNoClaim  = "no_claim"
)

// Condition says how the source stands at now: relaying (no Cause),
// starting (no successful claim yet, within the grace), or not relaying and
// why.
func (w *Worker) Condition(now time.Time) Condition {
	grace := w.o.MaxClaimFailure
	young := grace <= 0 || now.Sub(w.started) <= grace
	claimed := w.LastPoll().After(w.started)
	if p := w.takeover.Load(); p != nil {
		return Condition{Starting: young, Cause: CauseTakeover,
			Err: fmt.Errorf("exactly-once takeover failing for %s: %w", now.Sub(w.started).Round(time.Second), *p)}
	}
	if p := w.lastErr.Load(); p != nil && w.o.MaxClaimFailure > 0 {
		last := w.LastPoll()
		if last.Before(w.started) {
			last = w.started
		}
		since := now.Sub(last)
		if since > w.o.MaxClaimFailure {
			return Condition{Cause: CauseClaims, Err: fmt.Errorf("claims failing for %s (readiness.max_claim_failure %s): %w",
				since.Round(time.Second), w.o.MaxClaimFailure, *p)}
		}
		if !claimed {
			return Condition{Starting: true, Cause: CauseClaims, Err: fmt.Errorf("claims failing: %w", *p)}
		}
	}
	if age := time.Duration(w.oldestAge.Load()); w.o.MaxOldestPending > 0 && age > w.o.MaxOldestPending {
		return Condition{Cause: CauseBacklog, Err: fmt.Errorf("the oldest pending event is %s old (readiness.max_oldest_pending %s)",
			age.Round(time.Second), w.o.MaxOldestPending)}
	}
	if !claimed {
		if young {
			return Condition{Starting: true}
		}
		return Condition{Cause: CauseNoClaim, Err: fmt.Errorf("no successful claim in the %s since it started (readiness.max_claim_failure %s)",
			now.Sub(w.started).Round(time.Second), w.o.MaxClaimFailure)}
	}
	return Condition{}
}

// Started is when the worker was built (its lease term began).
func (w *Worker) Started() time.Time { return w.started }

// Pending is the backlog as this worker knows it: the latest count, less
// what batches took out of the pending set since.
func (w *Worker) Pending() int64 {
	w.statsMu.Lock()
	defer w.statsMu.Unlock()
	return w.pending
}

// OldestPending is the age of the oldest pending event as the latest claim
// or count saw it.
func (w *Worker) OldestPending() time.Duration { return time.Duration(w.oldestAge.Load()) }

// setOldest records the age of the oldest pending event, for Check and
// the gauge.
func (w *Worker) setOldest(age time.Duration) {
	age = max(age, 0)
	w.oldestAge.Store(int64(age))
	if m := w.o.Metrics; m != nil {
		m.OldestPendingAge.Set(age.Seconds())
	}
}

// LastPoll is the time of the latest successful claim query.
func (w *Worker) LastPoll() time.Time { return time.Unix(0, w.lastPoll.Load()) }

// Run relays until ctx is cancelled, then finishes what is in flight within
// the shutdown timeout and returns.
func (w *Worker) Run(ctx context.Context) error {
	// hard outlives ctx by the shutdown timeout: in-flight work uses it.
	hard, cancelHard := context.WithCancel(context.WithoutCancel(ctx))
	defer cancelHard()
	finished := make(chan struct{})
	go func() {
		select {
		case <-ctx.Done():
			t := time.NewTimer(w.o.ShutdownTimeout)
			defer t.Stop()
			select {
			case <-t.C:
				w.log.Warn("shutdown timeout reached; releasing batches in flight")
				cancelHard()
			case <-finished:
			}
		case <-finished:
		}
	}()

	if w.o.Txn != nil {
		defer func() {
			cctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), releaseTimeout)
			defer cancel()
			_ = w.o.Txn.Close(cctx)
		}()
	}
	// The stats loop ends with the claims (whether ctx ended, the lease
	// was lost or the worker stopped to recover). It starts before the
	// takeover, so that the backlog is counted (and relay_state says who
	// holds the source) while a takeover keeps failing.
	sctx, stopStats := context.WithCancel(ctx)
	defer stopStats()
	statsDone := make(chan struct{})
	go func() {
		defer close(statsDone)
		w.statsLoop(sctx)
	}()
	if w.o.Recover != nil && !w.recover(ctx) {
		stopStats()
		<-statsDone
		return ctx.Err()
	}
	slots := make(chan struct{}, w.o.Pipeline)
	ackQ := make(chan *inflight, w.o.Pipeline)
	ackerDone := make(chan struct{})
	go func() {
		defer close(ackerDone)
		for f := range ackQ {
			w.complete(hard, f)
			w.releasePlace()
			<-slots
		}
	}()
	retriesDone := make(chan struct{})
	go func() {
		defer close(retriesDone)
		t := time.NewTicker(retrySummaryEvery)
		defer t.Stop()
		w.retries.run(sctx, t.C)
	}()
	defer func() { stopStats(); <-retriesDone }()

	// Claims stop when ctx ends, or when a completion finds the lease lost.
	cctx, stopClaims := context.WithCancel(ctx)
	defer stopClaims()
	w.stopClaims = stopClaims
	w.claimLoop(cctx, hard, slots, ackQ)
	close(ackQ)
	<-ackerDone
	close(finished)
	stopStats()
	<-statsDone
	// The last counts, within the bound a rollback gets: the database may
	// be the reason for the shutdown.
	fctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), releaseTimeout)
	defer cancel()
	w.flushStats(fctx)
	return nil
}

func (w *Worker) claimLoop(ctx, hard context.Context, slots chan struct{}, ackQ chan *inflight) {
	interval := w.o.PollMin
	errWait := w.o.PollMin
	for {
		select {
		case slots <- struct{}{}:
		case <-ctx.Done():
			return
		}
		if g := w.o.Gate; g != nil {
			if err := g.Acquire(ctx); err != nil {
				<-slots
				return
			}
		}
		seq := w.book.StartClaim()
		start := time.Now()
		b, err := w.o.Store.Claim(ctx, w.o.BatchSize)
		if err != nil {
			w.releasePlace()
			<-slots
			if ctx.Err() != nil {
				return
			}
			if errors.Is(err, source.ErrLeaseLost) {
				w.log.Warn("lease lost: no more claims", "err", err)
				return
			}
			w.lastErr.Store(&err)
			if m := w.o.Metrics; m != nil {
				m.ClaimErrors.Inc()
			}
			w.log.Error("claim failed", "err", err, "retry_in", errWait)
			if !w.sleep(ctx, errWait, nil, nil) {
				return
			}
			errWait = min(errWait*2, 5*time.Second)
			continue
		}
		errWait = w.o.PollMin
		w.lastErr.Store(nil)
		now := time.Now()
		w.lastPoll.Store(now.UnixNano())
		if m := w.o.Metrics; m != nil {
			m.LastClaim.Set(float64(now.UnixNano()) / 1e9)
		}
		if b != nil {
			// The claim takes the oldest due rows first: its first row's
			// age is the backlog's age now, without waiting for the next
			// stats refresh.
			if c := b.Rows()[0].CreatedAt; !c.IsZero() {
				w.setOldest(now.Sub(c))
			}
		}
		if b == nil {
			w.releasePlace()
			<-slots
			// A batch that completes may free keys the empty claim found
			// held (a queue's participants in flight): it ends the wait.
			if !w.sleep(ctx, interval, w.o.Wake, w.freed) {
				return
			}
			interval = min(interval*2, w.idlePoll())
			continue
		}
		interval = w.o.PollMin
		f := w.start(hard, seq, b)
		if m := w.o.Metrics; m != nil {
			m.ClaimBatches.Inc()
			m.ClaimDuration.Observe(time.Since(start).Seconds())
			m.BatchSize.Observe(float64(len(f.rows)))
			m.InflightBatches.Inc()
		}
		ackQ <- f
		if len(f.rows) < w.o.BatchSize {
			// Drained: give rows a moment to accumulate (a NOTIFY cuts it short).
			if !w.sleep(ctx, w.o.PollMin, w.o.Wake, nil) {
				return
			}
		}
	}
}

// releasePlace gives a batch's place back to the gate, if there is one.
func (w *Worker) releasePlace() {
	if g := w.o.Gate; g != nil {
		g.Release()
	}
}

// idlePoll caps the wait between empty claims. With NOTIFY wake-ups the
// poll is only a safety net (a listener that reconnects wakes every source
// anyway), so an idle source is polled ten times less often.
func (w *Worker) idlePoll() time.Duration {
	if w.o.Wake != nil {
		if w.o.PollFallback > 0 {
			return w.o.PollFallback
		}
		return 10 * w.o.PollMax
	}
	return w.o.PollMax
}

// sleep waits d, or until wake (a notification) or freed (a completed
// batch) fires; false when ctx ended.
func (w *Worker) sleep(ctx context.Context, d time.Duration, wake, freed <-chan struct{}) bool {
	t := time.NewTimer(d)
	defer t.Stop()
	select {
	case <-ctx.Done():
		return false
	case <-t.C:
	case <-freed:
	case <-wake:
		if m := w.o.Metrics; m != nil {
			m.NotifyWakeups.Inc()
		}
		if w.o.Debounce > 0 {
			// Coalesce: the notifications of the next moment are part of
			// this wake-up.
			t.Reset(w.o.Debounce)
			select {
			case <-ctx.Done():
				return false
			case <-t.C:
			}
			select {
			case <-wake:
			default:
			}
		}
	}
	return true
}

var errReleased = errors.New("batch released at shutdown")
