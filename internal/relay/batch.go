package relay

import (
	"bytes"
	"context"
	"fmt"
	"time"

	"github.com/outbox-relay/outbox-relay/internal/order"
	"github.com/outbox-relay/outbox-relay/internal/sink"
	"github.com/outbox-relay/outbox-relay/internal/source"
)

// inflight is one claimed batch on its way through the pipeline.
type inflight struct {
	seq     uint64
	batch   source.Batch
	rows    []source.Row
	tgt     []int // each row's target (see routeRow)
	claimed time.Time
	// ticket is the batch's place in the order book; nil with ordering off.
	ticket    *order.Ticket
	outcome   source.Outcome
	held      map[string]time.Time // keys the commit holds, and until when
	holds     int                  // rows held (left pending, no attempt charged)
	violation int                  // rows a sink delivered after an earlier row of their key was left pending
	published chan struct{}        // closed once every result is in
	// turn is the batch's place among the transactions (delivery
	// exactly_once), and txn its committed transaction (0: none).
	turn *txnTurn
	txn  uint64
	// unknown says its transaction's commit got no clear answer.
	unknown bool
}

// start registers a claimed batch's keys and publishes it in the background.
func (w *Worker) start(hard context.Context, seq uint64, b source.Batch) *inflight {
	f := &inflight{
		seq: seq, batch: b, rows: b.Rows(), claimed: time.Now(),
		published: make(chan struct{}),
	}
	if w.o.Txn != nil {
		f.turn = w.nextTurn()
	}
	if w.o.Ordering {
		keys := make([]string, len(f.rows))
		for i := range f.rows {
			keys[i] = f.rows[i].OrderKey
		}
		f.ticket = w.book.Begin(seq, keys)
	}
	go w.publish(hard, f)
	return f
}

// attempt is the state of one batch's publication.
type attempt struct {
	f       *inflight
	msgs    []*sink.Message
	errs    []error
	results []order.Result
	at      []time.Time // a row's own time to wait (sink unavailable, fence)
	keys    []string    // order keys; all "" with ordering off
	// via, when set, publishes every message of the batch (its
	// transaction's producer, delivery exactly_once).
	via sink.Publisher
}

func (w *Worker) publish(ctx context.Context, f *inflight) {
	defer close(f.published)
	n := len(f.rows)
	a := &attempt{f: f, msgs: make([]*sink.Message, n), errs: make([]error, n),
		results: make([]order.Result, n), at: make([]time.Time, n), keys: make([]string, n)}
	f.tgt = make([]int, n)
	var now, later []int
	for i := range f.rows {
		if len(w.targets) > 1 {
			f.tgt[i] = w.routeRow(&f.rows[i])
		}
		if w.o.Ordering {
			a.keys[i] = f.rows[i].OrderKey
		}
		tg := &w.targets[f.tgt[i]]
		m, err := buildMessage(&f.rows[i], w.o.Name, w.o.ValidateJSON, tg, w.o.Headers)
		if err != nil {
			a.errs[i], a.results[i] = err, order.Invalid
			continue
		}
		if w.receipts {
			m.Receipt = &sink.Receipt{}
		}
		a.msgs[i] = m
		if f.ticket != nil && f.ticket.Waits(a.keys[i]) {
			later = append(later, i)
		} else {
			now = append(now, i)
		}
	}
	started := time.Now()
	if f.turn != nil {
		defer close(f.turn.done)
	}
	if f.turn == nil || w.beginTxn(ctx, a) {
		w.sendPlanned(ctx, a, now)
		if len(later) > 0 {
			for _, d := range f.ticket.Deps() {
				select {
				case <-d.Done():
				case <-ctx.Done():
				}
			}
			w.sendPlanned(ctx, a, later)
		}
		if f.turn != nil {
			w.commitTxn(ctx, a)
		}
	}
	if m := w.o.Metrics; m != nil {
		m.PublishDuration.Observe(time.Since(started).Seconds())
	}
	w.decide(a)
}

// sendPlanned publishes the rows at idx in the waves the order plan gives.
func (w *Worker) sendPlanned(ctx context.Context, a *attempt, idx []int) {
	if len(idx) == 0 {
		return
	}
	if !w.o.Ordering {
		w.send(ctx, a, idx)
		return
	}
	f := a.f
	sameDest := func(i, j int) bool {
		return f.tgt[i] == f.tgt[j] && a.msgs[i].Destination == a.msgs[j].Destination &&
			bytes.Equal(routingKey(a.msgs[i]), routingKey(a.msgs[j]))
	}
	p := order.NewPlan(a.keys, idx, sameDest)
	for wave := range p.Waves() {
		send, held := p.Wave(wave)
		for _, i := range held {
			a.results[i] = order.NotSent
		}
		w.send(ctx, a, send)
		for _, i := range send {
			p.Record(i, a.results[i])
		}
	}
}

// routingKey is what picks a message's partition.
func routingKey(m *sink.Message) []byte {
	if m.PartitionKey != nil {
		return m.PartitionKey
	}
	return m.Key
}

// send publishes the rows at idx that the order book lets go; the others are
// not sent.
func (w *Worker) send(ctx context.Context, a *attempt, idx []int) {
	batch := make([]*sink.Message, 0, len(idx))
	sent := make([]int, 0, len(idx))
	tgt := make([]int, 0, len(idx))
	var fenced map[int]bool
	if a.f.ticket != nil {
		w.book.Sift(a.f.ticket, a.keys, idx, func(i int, until time.Time) {
			if fenced == nil {
				fenced = map[int]bool{}
			}
			fenced[i] = true
			a.at[i] = until
		})
	}
	for _, i := range idx {
		if ctx.Err() != nil || fenced[i] {
			a.results[i] = order.NotSent
			continue
		}
		batch = append(batch, a.msgs[i])
		sent = append(sent, i)
		tgt = append(tgt, a.f.tgt[i])
	}
	if len(batch) == 0 {
		return
	}
	var res []error
	if a.via != nil {
		res = a.via.Publish(ctx, batch)
	} else {
		res = w.publishTo(ctx, batch, tgt)
	}
	for j, i := range sent {
		a.errs[i] = res[j]
		a.results[i], a.at[i] = resultOf(res[j])
	}
}

// resultOf is what a sink's answer for one message means for its row, and
// until when an unavailable sink holds it (zero: the least hold). A failure
// of the sink rather than of the message (unavailable: its circuit is open
// or the call passed its deadline; down: it could not be reached, or refuses
// the relay) charges no attempt, so that an outage, however long, sends no
// row to the dead-letter table.
func resultOf(err error) (order.Result, time.Time) {
	until, unavailable := sink.IsUnavailable(err)
	switch {
	case err == nil:
		return order.OK, time.Time{}
	case unavailable:
		return order.Unavailable, until
	case sink.IsDown(err):
		return order.Unavailable, time.Time{}
	case sink.IsTerminal(err):
		return order.Terminal, time.Time{}
	}
	return order.Failed, time.Time{}
}

// decide turns the results into the batch's outcome: the order book's
// verdict for each row, the retry budget and the backoff.
func (w *Worker) decide(a *attempt) {
	f := a.f
	v := order.Judge(a.keys, a.results, w.o.Ordering)
	f.violation = v.Violations
	now := time.Now()
	for i, fate := range v.Fates {
		if fate != order.Retry {
			continue
		}
		r := &f.rows[i]
		budget := w.o.MaxAttempts
		if r.MaxAttempts > 0 {
			budget = r.MaxAttempts
		}
		if r.Attempts+1 >= budget {
			v.Fates[i] = order.Dead
			continue
		}
		a.at[i] = now.Add(retryDelay(w.o.Backoff, r.Attempts+1, a.errs[i]))
	}
	f.held = order.Schedule(a.keys, v.Fates, a.at, now.Add(w.holdFloor()))
	if w.receipts {
		f.outcome.Receipts = make([]source.Receipt, len(f.rows))
		for i, m := range a.msgs {
			if m != nil && m.Receipt != nil {
				f.outcome.Receipts[i] = source.Receipt{Reference: m.Receipt.Reference, Code: m.Receipt.Code, Latency: m.Receipt.Latency}
			}
		}
	}
	for i, fate := range v.Fates {
		r := &f.rows[i]
		switch fate {
		case order.Published:
			f.outcome.Published = append(f.outcome.Published, i)
		case order.Dead:
			if a.results[i] == order.Failed {
				attempts := r.Attempts + 1
				reason := fmt.Sprintf("retry budget spent after %d attempts: %v", attempts, a.errs[i])
				f.outcome.Dead = append(f.outcome.Dead, deadLetter(i, r, attempts, reason, true))
				continue
			}
			f.outcome.Dead = append(f.outcome.Dead, deadLetter(i, r, r.Attempts+1, a.errs[i].Error(), false))
		case order.Retry:
			f.outcome.Retry = append(f.outcome.Retry, source.Retry{Index: i, Attempts: r.Attempts + 1,
				At: a.at[i], Err: a.errs[i].Error()})
		case order.Hold:
			f.holds++
			f.outcome.Retry = append(f.outcome.Retry, source.Retry{Index: i, Attempts: r.Attempts,
				At: a.at[i], Err: holdReason(a.results[i], a.errs[i])})
		}
	}
}

// holdFloor is the least time a held row waits: long enough for the batches
// claimed before its hold to finish, so that the next claim takes its key
// from its first pending row.
func (w *Worker) holdFloor() time.Duration {
	return max(w.o.PollMin, min(w.o.Backoff.Initial, time.Second), 100*time.Millisecond)
}

func holdReason(r order.Result, err error) string {
	if r == order.Unavailable || (r != order.NotSent && err != nil) {
		return "held: " + err.Error()
	}
	return "held: an earlier row of its key is pending"
}

func deadLetter(i int, r *source.Row, attempts int, reason string, exhausted bool) source.Dead {
	return source.Dead{Index: i, Attempts: attempts, Reason: reason, Exhausted: exhausted,
		PayloadIsJSON: isJSON(r.Payload), HeadersAreJSON: r.Headers != nil && isJSON(r.Headers)}
}
