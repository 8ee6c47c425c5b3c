package bench

import (
	"context"
	"errors"
	"fmt"
	"sync"
	"time"

	"github.com/outbox-relay/outbox-relay/internal/app"
	"github.com/outbox-relay/outbox-relay/internal/config"
	"github.com/outbox-relay/outbox-relay/internal/source"
)

// DefaultMaxTime is how long one ceiling loop or relay drain may take by
// default before it is cut short.
const DefaultMaxTime = 3 * time.Minute

// maxTime is the time limit of each measurement.
func (o Options) maxTime() time.Duration {
	if o.MaxTime > 0 {
		return o.MaxTime
	}
	return DefaultMaxTime
}

// maxConns is the relay's connection pool: a claim transaction for each
// batch in flight of each bucket of the source (docs/shards.md: shards ×
// pipeline), and a few for leases, stats and acknowledgements; or
// o.MaxConns.
func (o Options) maxConns() int {
	if o.MaxConns > 0 {
		return o.MaxConns
	}
	return max(o.Shards, 1)*o.Pipeline + 4
}

// cutShort ends a measurement at the time limit: the rows drained by then
// over the time it took are its rate.
type cutShort struct{ elapsed time.Duration }

func (c cutShort) Error() string {
	return fmt.Sprintf("cut short after %s", c.elapsed.Round(time.Millisecond))
}

// pass is one fresh table of a spec, prefilled and drained: with a
// ceiling, first by the ceiling loop and then, prefilled again, by the
// relay.
type pass struct {
	ceiling, relay Measure
	sink, note     string
	stored         *int
	// rowsAfter and doneAfter count the table's rows, and its delivered
	// ones, after the relay phase (with a history only).
	rowsAfter, doneAfter *int
}

// passFunc runs a pass: analyze says whether the prefill is analyzed,
// withCeiling whether the ceiling loop runs first.
type passFunc func(o Options, analyze, withCeiling bool) (pass, error)

// newDrainResult starts the result of draining sp's table of shape sh,
// and returns o with the history that table gets: none, said in the
// result, where its delivered rows are deleted.
func newDrainResult(o Options, driver string, sp *spec, sh *shape, ordering bool) (Result, Options) {
	res := Result{Workload: "drain", Driver: driver, Layout: sp.name, Ordering: ordering,
		Delivery: firstOr(o.Deliveries, config.DeliveryAtLeastOnce), Rows: o.Rows, Keys: o.Keys, BatchSize: o.BatchSize, Pipeline: o.Pipeline,
		Replicas: max(o.Replicas, 1), Shards: max(o.Shards, 1), Databases: o.Databases}
	if sp.preset {
		res.Layout, res.Preset = "", sp.name
	}
	if o.History > 0 && !sh.keepsDelivered() {
		res.HistoryNote, o.History = historyNote, 0
	}
	res.History = o.History
	return res, o
}

// label names a result's table in progress lines.
func (r Result) label() string {
	l := r.Layout
	if r.Preset != "" {
		l = "preset " + r.Preset
	}
	if r.Replicas > 1 || r.Shards > 1 || r.Databases > 0 {
		l += fmt.Sprintf(" (%d replicas, %d shards", max(r.Replicas, 1), max(r.Shards, 1))
		if r.Databases > 0 {
			l += fmt.Sprintf(", %d databases", r.Databases)
		}
		l += ")"
	}
	return l
}

// drainPasses measures one table: with o.NoAnalyze first the relay on a
// backlog never analyzed (autovacuum off), then, in a fresh table of the
// same shape prefilled and analyzed, the ceiling and the relay; with a
// sink other than Kafka, the sink's ceiling last (measureSinkCeiling).
func drainPasses(ctx context.Context, o Options, res Result, k kafkaEnv, run passFunc) (Result, error) {
	name := fmt.Sprintf("%s ordering=%v", res.label(), res.Ordering)
	if o.NoAnalyze {
		progress(o, "%s: never analyzed", name)
		p, err := run(o, false, false)
		if err != nil {
			return res, fmt.Errorf("%s, not analyzed: %w", res.label(), err)
		}
		res.NoAnalyze = &p.relay
		progress(o, "%s: relay %.0f events/s not analyzed%s; now analyzed, in a fresh table", name, p.relay.EventsPerSec, cutNote(p.relay))
		o.RelayProfile = nil // one profile per file: the first relay phase
	}
	p, err := run(o, true, true)
	if err != nil {
		return res, fmt.Errorf("%s: %w", res.label(), err)
	}
	res.Sink, res.SinkNote, res.SinkStored = p.sink, p.note, p.stored
	res.TableRowsAfter, res.DeliveredAfter = p.rowsAfter, p.doneAfter
	res.Ceiling, res.Relay = p.ceiling, p.relay
	if res.Ceiling.EventsPerSec > 0 {
		res.Ratio = res.Relay.EventsPerSec / res.Ceiling.EventsPerSec
	}
	res.Bound = machineBound(cores(), res.Ceiling, res.Relay)
	if o.Sink != "" && o.Sink != "kafka" {
		sc, err := measureSinkCeiling(ctx, o, k)
		if err != nil {
			return res, fmt.Errorf("%s: %w", res.label(), err)
		}
		res.SinkCeiling = sc
		if sc.EventsPerSec > 0 {
			res.SinkRatio = res.Relay.EventsPerSec / sc.EventsPerSec
		}
		progress(o, "%s: sink ceiling %.0f events/s%s, relay/sink ceiling %.2f", name, sc.EventsPerSec,
			map[bool]string{true: " (cut short)"}[sc.CutShort], res.SinkRatio)
	}
	if res.NoAnalyze != nil && res.Relay.EventsPerSec > 0 {
		res.NoAnalyzeRatio = res.NoAnalyze.EventsPerSec / res.Relay.EventsPerSec
	}
	res.PeakRSSBytes = peakRSS()
	if k.br != nil && res.Sink == "kafka" {
		res.BrokerRSS = k.br.rss()
	}
	progress(o, "%s: relay %.0f events/s%s, ratio %.2f; machine bound %.0f events/s, ratio to the lower limit %.2f",
		name, res.Relay.EventsPerSec, cutNote(res.Relay), res.Ratio, res.Bound.EventsPerSec, res.Bound.Ratio)
	return res, nil
}

func cutNote(m Measure) string {
	if m.CutShort {
		return fmt.Sprintf(" (cut short: %d of the rows in %.0f s)", m.Events, m.Seconds)
	}
	return ""
}

// ceiling loops the relay's own claim and acknowledge statements, one batch
// at a time, with no broker, until the table is empty or o's time limit.
func ceiling(ctx context.Context, st source.Store, o Options) (int, error) {
	n := 0
	start, last := time.Now(), time.Now()
	cctx, cancel := context.WithTimeout(ctx, o.maxTime())
	defer cancel()
	stopped := func(err error) (int, error) {
		if cctx.Err() != nil && ctx.Err() == nil {
			progress(o, "  ceiling: cut short at %d/%d after %s", n, o.Rows, o.maxTime())
			return n, cutShort{time.Since(start)}
		}
		return n, err
	}
	for {
		b, err := st.Claim(cctx, o.BatchSize)
		if err != nil {
			return stopped(err)
		}
		if b == nil {
			return n, nil
		}
		rows := b.Rows()
		all := make([]int, len(rows))
		for i := range all {
			all[i] = i
		}
		if err := b.Complete(cctx, source.Outcome{Published: all}); err != nil {
			_ = b.Release(context.WithoutCancel(ctx))
			return stopped(err)
		}
		n += len(rows)
		if time.Since(last) > time.Second {
			progress(o, "  ceiling: %d/%d", n, o.Rows)
			last = time.Now()
		}
	}
}

// ceilingAll is the ceiling over several databases (--databases): the
// ceiling loop on each one's store, all at once, the drained rows summed.
// It is cut short when any loop is, at the time the last one stopped.
func ceilingAll(ctx context.Context, stores []source.Store, o Options) (int, error) {
	if len(stores) == 1 {
		return ceiling(ctx, stores[0], o)
	}
	each := o
	each.Progress = nil // one loop's progress is not the run's
	ns, errs := make([]int, len(stores)), make([]error, len(stores))
	start := time.Now()
	var wg sync.WaitGroup
	for i, st := range stores {
		wg.Go(func() { ns[i], errs[i] = ceiling(ctx, st, each) })
	}
	wg.Wait()
	n, cut := 0, false
	for i, err := range errs {
		n += ns[i]
		if errors.As(err, new(cutShort)) {
			cut = true
		} else if err != nil {
			return n, err
		}
	}
	if cut {
		progress(o, "  ceiling: cut short at %d/%d after %s", n, o.Rows, o.maxTime())
		return n, cutShort{time.Since(start)}
	}
	return n, nil
}

// stores are the stores of srcs, one a database of an entry of several.
func stores(srcs []*app.Source) []source.Store {
	out := make([]source.Store, len(srcs))
	for i, s := range srcs {
		out[i] = s.Store
	}
	return out
}

// relayStopTimeout bounds the wait for a relay to stop once its drain is
// over.
const relayStopTimeout = 30 * time.Second

// relay runs the whole relay until it has published every row, or until
// o's time limit.
func relay(ctx context.Context, a *app.App, o Options) (n int, err error) {
	return relayAll(ctx, []*app.App{a}, o)
}

// relayAll runs the relay processes apps (replicas sharing the source)
// until together they have published o.Rows events.
func relayAll(ctx context.Context, apps []*app.App, o Options) (n int, err error) {
	rctx, stop := context.WithCancel(ctx)
	done := make(chan error, len(apps))
	for _, a := range apps {
		go func() { done <- a.Run(rctx) }()
	}
	exited := 0
	defer func() {
		stop()
		deadline := time.After(relayStopTimeout)
		for ; exited < len(apps); exited++ {
			select {
			case <-done:
			case <-deadline:
				if err == nil || errors.As(err, new(cutShort)) {
					err = fmt.Errorf("the relay did not stop within %s", relayStopTimeout)
				}
				return
			}
		}
	}()
	published := func() int {
		n := 0
		for _, a := range apps {
			n += a.Published()
		}
		return n
	}
	start, last := time.Now(), time.Now()
	for {
		n := published()
		if n >= o.Rows {
			return n, nil
		}
		if elapsed := time.Since(start); elapsed >= o.maxTime() {
			progress(o, "  relay: cut short at %d/%d after %s", n, o.Rows, o.maxTime())
			return n, cutShort{elapsed}
		}
		select {
		case err := <-done:
			exited++
			return n, fmt.Errorf("relay stopped early: %v", err)
		case <-ctx.Done():
			return n, ctx.Err()
		case <-time.After(20 * time.Millisecond):
		}
		if time.Since(last) > time.Second {
			progress(o, "  relay: %d/%d", n, o.Rows)
			last = time.Now()
		}
	}
}

// measured is fn's count, and how long it took: its own account when it
// was cut short.
func measured(fn func() (int, error)) (n int, elapsed time.Duration, cut bool, err error) {
	start := time.Now()
	n, err = fn()
	elapsed = time.Since(start)
	var c cutShort
	if errors.As(err, &c) {
		return n, c.elapsed, true, nil
	}
	return n, elapsed, false, err
}
