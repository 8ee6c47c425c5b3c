package relay

import (
	"context"
	"errors"
	"fmt"
	"time"

	"github.com/outbox-relay/outbox-relay/internal/order"
	"github.com/outbox-relay/outbox-relay/internal/sink"
)

// Transactor publishes each batch of a source in one transaction of its
// sink, with the source's progress (delivery exactly_once). It has
// Producers transactional producers, each with one transaction at a time;
// batches take them in turn. Begin opens a transaction on a producer before
// the batch's first message and returns the publisher of its messages;
// Commit ends it with the ids of the rows it delivered (failed aborts it
// instead); Confirm says the database has marked them.
type Transactor interface {
	Producers() int
	Begin(ctx context.Context, producer int) (sink.Publisher, error)
	Commit(ctx context.Context, producer int, ids []string, failed bool) (uint64, error)
	Confirm(producer int, n uint64)
	Close(ctx context.Context) error
}

// txnTurn is a batch's place among the transactions: its producer, taken
// in claim order, and that producer's previous transaction, which it waits
// for.
type txnTurn struct {
	producer int
	prev     <-chan struct{} // closed when the producer's previous transaction ended
	done     chan struct{}   // closed when this batch's ended
}

// nextTurn takes the next place in the transactions' order (the claim
// loop calls it, in claim order).
func (w *Worker) nextTurn() *txnTurn {
	if w.lastTxn == nil {
		w.lastTxn = make([]<-chan struct{}, w.o.Txn.Producers())
		for i := range w.lastTxn {
			w.lastTxn[i] = closedChan()
		}
	}
	producer := int(w.turns % uint64(len(w.lastTxn)))
	w.turns++
	t := &txnTurn{producer: producer, prev: w.lastTxn[producer], done: make(chan struct{})}
	w.lastTxn[producer] = t.done
	return t
}

// beginTxn waits for the batch's turn and opens its transaction; on
// failure every row is held (no attempt charged) and nothing is sent.
func (w *Worker) beginTxn(ctx context.Context, a *attempt) bool {
	select {
	case <-a.f.turn.prev:
	case <-ctx.Done():
		w.holdAll(a, ctx.Err())
		return false
	}
	via, err := w.o.Txn.Begin(ctx, a.f.turn.producer)
	if err != nil {
		// The producer is unusable (fenced, failed): a new one's takeover.
		w.holdAll(a, err)
		a.f.unknown = true
		w.log.Error("Kafka transaction could not begin; stopping to recover", "err", err)
		return false
	}
	a.via = via
	return true
}

// commitTxn commits the batch's transaction with the ids it delivered, or
// aborts it when a message failed; when nothing is committed, the rows
// the sink took are held instead (no attempt charged: they were never
// visible to read_committed consumers).
func (w *Worker) commitTxn(ctx context.Context, a *attempt) {
	var ids []string
	failed := false
	for i, r := range a.results {
		switch r {
		case order.OK:
			ids = append(ids, a.f.rows[i].ID)
		case order.Failed, order.Terminal, order.Unavailable:
			failed = true
		}
	}
	n, err := w.o.Txn.Commit(ctx, a.f.turn.producer, ids, failed)
	if err == nil {
		a.f.txn = n
		return
	}
	if errors.Is(err, sink.ErrTxnUnknown) {
		// Kafka may have the batch: its rows are held, and the worker
		// stops after it; the takeover that follows reads the progress
		// record and marks them if the commit went through.
		a.f.unknown = true
		w.log.Error("Kafka transaction's outcome unknown; stopping to recover", "err", err, "rows", len(ids))
	} else if !failed {
		w.log.Warn("Kafka transaction not committed; its rows are tried again", "err", err, "rows", len(ids))
	}
	until := time.Now().Add(w.holdFloor())
	for i, r := range a.results {
		if r == order.OK {
			a.results[i], a.at[i], a.errs[i] = order.Unavailable, until, fmt.Errorf("not delivered: %w", err)
		}
	}
}

// holdAll holds every row of the attempt: not sent, no attempt charged.
func (w *Worker) holdAll(a *attempt, err error) {
	until := time.Now().Add(w.holdFloor())
	for i := range a.results {
		if a.errs[i] == nil {
			a.results[i], a.at[i], a.errs[i] = order.Unavailable, until, fmt.Errorf("not sent: %w", err)
		}
	}
}

// recover runs Options.Recover until it succeeds; false when ctx ended
// first.
func (w *Worker) recover(ctx context.Context) bool {
	wait := w.o.PollMin
	for {
		err := w.o.Recover(ctx)
		if err == nil {
			w.takeover.Store(nil)
			return true
		}
		if ctx.Err() != nil {
			return false
		}
		w.takeover.Store(&err)
		w.log.Error("exactly-once takeover failed; retrying", "err", err, "retry_in", wait)
		if !w.sleep(ctx, wait, nil, nil) {
			return false
		}
		wait = min(wait*2, 5*time.Second)
	}
}
