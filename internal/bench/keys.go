package bench

import (
	"context"
	"encoding/json"
	"sync"
	"time"

	"github.com/twmb/franz-go/pkg/kgo"
)

// keysRun drains a backlog with ordering on, all rows on one hot key or
// spread over many, and checks with a consumer that every key's events
// arrived in the order they were written.
func keysRun(ctx context.Context, db pgDB, o Options, k kafkaEnv, keys int) (Result, error) {
	t := newTable("delete", deleteLayoutPG, db.dsn)
	res := Result{Workload: "keys", Driver: "postgres", Layout: t.layout, Ordering: true, Rows: o.Rows, Keys: keys, BatchSize: o.BatchSize, Pipeline: o.Pipeline}
	if err := t.create(ctx, db.pool); err != nil {
		return res, err
	}
	defer t.drop(context.WithoutCancel(ctx), db.pool)
	tg := kafkaTarget(k)
	res.Sink, res.SinkNote = tg.kind, tg.note
	a, stmts, cleanup, err := openRelay(ctx, pgDBs{db}, tg, o, t, true)
	if err != nil {
		return res, err
	}
	defer cleanup()
	progress(o, "keys=%d: prefilling %d rows", keys, o.Rows)
	if err := t.fill(ctx, db.pool, tg.topic, 0, o.Rows, keys, o.PayloadBytes, true); err != nil {
		return res, err
	}
	oc, err := newOrderChecker(ctx, k.brokers)
	if err != nil {
		return res, err
	}
	defer oc.stop()
	res.Relay, err = measure(ctx, pgDBs{db}, t, tg.cpu, stmts, func() (int, error) { return relay(ctx, a, o) })
	if err != nil {
		return res, err
	}
	deadline := time.Now().Add(30 * time.Second)
	for oc.count() < o.Rows && time.Now().Before(deadline) {
		time.Sleep(20 * time.Millisecond)
	}
	held := oc.count() >= o.Rows && oc.violations() == 0
	res.OrderHeld = &held
	res.PeakRSSBytes = peakRSS()
	progress(o, "keys=%d: relay %.0f events/s, order held: %v (%d received, %d out of order)", keys, res.Relay.EventsPerSec, held, oc.count(), oc.violations())
	return res, nil
}

// orderChecker consumes the benchmark topic and checks that each key's
// sequence numbers first arrive in increasing order.
type orderChecker struct {
	mu     sync.Mutex
	last   map[string]int
	seen   map[int]bool
	bad    int
	cancel context.CancelFunc
	done   chan struct{}
	cl     *kgo.Client
}

func newOrderChecker(ctx context.Context, brokers []string) (*orderChecker, error) {
	cl, err := consumerFromEnd(ctx, brokers)
	if err != nil {
		return nil, err
	}
	cctx, cancel := context.WithCancel(ctx)
	oc := &orderChecker{last: map[string]int{}, seen: map[int]bool{}, cancel: cancel, done: make(chan struct{}), cl: cl}
	go func() {
		defer close(oc.done)
		for cctx.Err() == nil {
			cl.PollFetches(cctx).EachRecord(oc.record)
		}
	}()
	return oc, nil
}

func (oc *orderChecker) record(r *kgo.Record) {
	var p struct {
		Seq int    `json:"seq"`
		Key string `json:"key"`
	}
	if json.Unmarshal(r.Value, &p) != nil {
		return
	}
	oc.mu.Lock()
	defer oc.mu.Unlock()
	if oc.seen[p.Seq] {
		return
	}
	oc.seen[p.Seq] = true
	if prev, ok := oc.last[p.Key]; ok && prev > p.Seq {
		oc.bad++
	}
	oc.last[p.Key] = p.Seq
}

func (oc *orderChecker) count() int {
	oc.mu.Lock()
	defer oc.mu.Unlock()
	return len(oc.seen)
}

func (oc *orderChecker) violations() int {
	oc.mu.Lock()
	defer oc.mu.Unlock()
	return oc.bad
}

func (oc *orderChecker) stop() { oc.cancel(); <-oc.done; oc.cl.Close() }
