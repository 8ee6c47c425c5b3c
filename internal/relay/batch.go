package relay

import (
	"bytes"
	"context"
	"fmt"
	"slices"
	"time"

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
	// keyDep maps a key to the earlier batch in flight that holds it.
	keyDep    map[string]*inflight
	outcome   source.Outcome
	deferred  []int
	violation int           // rows published after an earlier row of their key failed
	published chan struct{} // closed once every result is in
	done      chan struct{} // closed once the batch committed or was released
}

// start registers a claimed batch's keys and publishes it in the background.
func (w *Worker) start(hard context.Context, seq uint64, b source.Batch) *inflight {
	f := &inflight{
		seq: seq, batch: b, rows: b.Rows(), claimed: time.Now(),
		published: make(chan struct{}), done: make(chan struct{}),
	}
	if w.o.Ordering {
		w.mu.Lock()
		for i := range f.rows {
			k := f.rows[i].OrderKey
			if p := w.lastByKey[k]; p != nil && p != f {
				if f.keyDep == nil {
					f.keyDep = map[string]*inflight{}
				}
				f.keyDep[k] = p
			}
			w.lastByKey[k] = f
		}
		w.mu.Unlock()
	}
	go w.publish(hard, f)
	return f
}

// fencedLocked reports whether rows of key k in the batch with sequence seq
// must be deferred: a batch that committed after this one was claimed left
// the key waiting (retry scheduled or commit failed). w.mu must be held.
func (w *Worker) fencedLocked(k string, seq uint64) bool {
	v, ok := w.fence[k]
	return ok && v >= seq
}

// Row states while a batch is published: sent (or waiting), or deferred
// (left pending untouched).
const (
	stateNone int8 = iota
	stateDeferred
)

func (w *Worker) publish(ctx context.Context, f *inflight) {
	defer close(f.published)
	n := len(f.rows)
	msgs := make([]*sink.Message, n)
	errs := make([]error, n)
	state := make([]int8, n)
	f.tgt = make([]int, n)
	var now, later []int
	for i := range f.rows {
		if len(w.targets) > 1 {
			f.tgt[i] = w.routeRow(&f.rows[i])
		}
		m, err := buildMessage(&f.rows[i], w.o.Name, w.o.ValidateJSON, w.targets[f.tgt[i]].maxBytes)
		if err != nil {
			errs[i] = err
			continue
		}
		msgs[i] = m
		if f.keyDep[f.rows[i].OrderKey] != nil {
			later = append(later, i)
		} else {
			now = append(now, i)
		}
	}
	started := time.Now()
	if !w.o.Ordering {
		w.send(ctx, f, append(now, later...), msgs, errs, state)
	} else {
		w.sendInWaves(ctx, f, now, msgs, errs, state)
		if len(later) > 0 {
			deps := make([]*inflight, 0, len(f.keyDep))
			for _, d := range f.keyDep {
				if !slices.Contains(deps, d) {
					deps = append(deps, d)
				}
			}
			slices.SortFunc(deps, func(a, b *inflight) int { return int(a.seq - b.seq) })
			for _, d := range deps {
				select {
				case <-d.done:
				case <-ctx.Done():
				}
			}
			w.sendInWaves(ctx, f, later, msgs, errs, state)
		}
	}
	if m := w.o.Metrics; m != nil {
		m.PublishDuration.Observe(time.Since(started).Seconds())
	}
	w.decide(f, msgs, errs, state)
}

// sendInWaves publishes the rows at idx (in order) so that rows of one key
// bound for different partitions (or sinks) never overlap: a sink keeps
// order only within a partition. A key's rows are cut into segments of consecutive rows
// with the same route; wave n sends every key's n-th segment, and a key whose
// row failed (retryably) or was deferred sends nothing more. Most keys have
// one segment, so most batches are one wave.
func (w *Worker) sendInWaves(ctx context.Context, f *inflight, idx []int, msgs []*sink.Message, errs []error, state []int8) {
	type segment struct {
		n    int
		tgt  int
		dest string
		key  []byte
	}
	waves := make([]int, len(idx))
	segs := make(map[string]*segment, len(idx))
	last := 0
	for j, i := range idx {
		dest, key, tgt := msgs[i].Destination, routingKey(msgs[i]), f.tgt[i]
		k := f.rows[i].OrderKey
		s := segs[k]
		switch {
		case s == nil:
			segs[k] = &segment{tgt: tgt, dest: dest, key: key}
		case s.tgt != tgt || s.dest != dest || !bytes.Equal(s.key, key):
			s.n++
			s.tgt, s.dest, s.key = tgt, dest, key
			waves[j] = s.n
			last = max(last, s.n)
		default:
			waves[j] = s.n
		}
	}
	if last == 0 {
		w.send(ctx, f, idx, msgs, errs, state)
		return
	}
	stopped := map[string]bool{}
	for wave := 0; wave <= last; wave++ {
		var batch []int
		for j, i := range idx {
			if waves[j] != wave {
				continue
			}
			if stopped[f.rows[i].OrderKey] {
				state[i] = stateDeferred
				continue
			}
			batch = append(batch, i)
		}
		w.send(ctx, f, batch, msgs, errs, state)
		for _, i := range batch {
			if state[i] == stateDeferred || (errs[i] != nil && !sink.IsTerminal(errs[i])) {
				stopped[f.rows[i].OrderKey] = true
			}
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

// send publishes the rows at idx that are not fenced; fenced rows are
// deferred.
func (w *Worker) send(ctx context.Context, f *inflight, idx []int, msgs []*sink.Message, errs []error, state []int8) {
	if len(idx) == 0 {
		return
	}
	batch := make([]*sink.Message, 0, len(idx))
	sent := make([]int, 0, len(idx))
	tgt := make([]int, 0, len(idx))
	if w.o.Ordering {
		w.mu.Lock()
		for _, i := range idx {
			if w.fencedLocked(f.rows[i].OrderKey, f.seq) {
				state[i] = stateDeferred
			}
		}
		w.mu.Unlock()
	}
	for _, i := range idx {
		if state[i] == stateDeferred || ctx.Err() != nil {
			state[i] = stateDeferred
			continue
		}
		batch = append(batch, msgs[i])
		sent = append(sent, i)
		tgt = append(tgt, f.tgt[i])
	}
	if len(batch) == 0 {
		return
	}
	res := w.publishTo(ctx, batch, tgt)
	for j, i := range sent {
		errs[i] = res[j]
	}
}

// decide turns results into the batch's outcome, walking rows in order so
// that a key's first failure defers the rest of that key.
func (w *Worker) decide(f *inflight, msgs []*sink.Message, errs []error, state []int8) {
	// failedKey records a key's first failure in this batch: a later row of
	// the key that failed too did so because of it (the sink fails or holds
	// back the rest of the key) and is deferred, not charged an attempt. A
	// later row delivered after a retryable failure is a violation; after a
	// terminal one it is not, as the failed row will never be published.
	const (
		failedTerminal = 1
		failedRetry    = 2
	)
	failedKey := map[string]int8{}
	for i := range f.rows {
		r := &f.rows[i]
		if state[i] == stateDeferred {
			f.deferred = append(f.deferred, i)
			continue
		}
		err := errs[i]
		if msgs[i] == nil { // could not be built: terminal
			f.outcome.Dead = append(f.outcome.Dead, deadLetter(i, r, r.Attempts+1, err.Error(), false))
			continue
		}
		if prior := failedKey[r.OrderKey]; w.o.Ordering && prior != 0 {
			if err != nil {
				f.deferred = append(f.deferred, i)
				continue
			}
			if prior == failedRetry {
				f.violation++
			}
		}
		switch {
		case err == nil:
			f.outcome.Published = append(f.outcome.Published, i)
		case sink.IsTerminal(err):
			failedKey[r.OrderKey] = failedTerminal
			f.outcome.Dead = append(f.outcome.Dead, deadLetter(i, r, r.Attempts+1, err.Error(), false))
		default:
			failedKey[r.OrderKey] = failedRetry
			attempts := r.Attempts + 1
			budget := w.o.MaxAttempts
			if r.MaxAttempts > 0 {
				budget = r.MaxAttempts
			}
			if attempts >= budget {
				reason := fmt.Sprintf("retry budget spent after %d attempts: %v", attempts, err)
				f.outcome.Dead = append(f.outcome.Dead, deadLetter(i, r, attempts, reason, true))
				continue
			}
			f.outcome.Retry = append(f.outcome.Retry, source.Retry{Index: i, Attempts: attempts,
				At: time.Now().Add(retryDelay(w.o.Backoff, attempts, err)), Err: err.Error()})
		}
	}
}

func deadLetter(i int, r *source.Row, attempts int, reason string, exhausted bool) source.Dead {
	return source.Dead{Index: i, Attempts: attempts, Reason: reason, Exhausted: exhausted,
		PayloadIsJSON: isJSON(r.Payload), HeadersAreJSON: r.Headers != nil && isJSON(r.Headers)}
}
