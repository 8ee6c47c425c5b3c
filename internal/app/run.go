package app

import (
	"cmp"
	"context"
	"errors"
	"fmt"
	"slices"
	"sync"
	"time"

	"github.com/outbox-relay/outbox-relay/internal/admin"
	"github.com/outbox-relay/outbox-relay/internal/config"
	"github.com/outbox-relay/outbox-relay/internal/layout"
	"github.com/outbox-relay/outbox-relay/internal/payloadschema"
	"github.com/outbox-relay/outbox-relay/internal/relay"
	"github.com/outbox-relay/outbox-relay/internal/sink"
	"github.com/outbox-relay/outbox-relay/internal/source"
	"github.com/outbox-relay/outbox-relay/internal/source/driver"
)

// runningSource is a source this process serves: each of its shards (the
// whole source, unless sources[].shards splits it) relayed while this
// process holds the shard's lease, standing by while another replica does.
type runningSource struct {
	cs     config.Source
	shards []*runningShard
}

// runningShard is one shard of a running source. It keeps what this
// process knows of the shard's lease (see condition).
type runningShard struct {
	cs     config.Source
	bucket source.Bucket

	mu     sync.Mutex
	worker *relay.Worker // nil while standing by
	// lease is where this process stands with the shard's lease, since
	// when, and why it could not have it (nil: another replica holds it).
	lease    leasePhase
	since    time.Time
	leaseErr error
}

func newRunningSource(cs config.Source, shards []Shard) *runningSource {
	r := &runningSource{cs: cs}
	for _, sh := range shards {
		r.shards = append(r.shards, &runningShard{cs: cs, bucket: sh.Bucket, lease: leaseAcquiring, since: time.Now()})
	}
	return r
}

// active is a worker relaying the source in this process (whichever
// bucket it claims, its backlog figures are the whole table's), or nil.
func (r *runningSource) active() *relay.Worker {
	for _, sh := range r.shards {
		if w := sh.active(); w != nil {
			return w
		}
	}
	return nil
}

func (r *runningShard) active() *relay.Worker {
	r.mu.Lock()
	defer r.mu.Unlock()
	return r.worker
}

func (r *runningShard) set(w *relay.Worker) {
	r.mu.Lock()
	r.worker = w
	r.mu.Unlock()
}

// Run starts the admin server, the listeners and every source, re-checks
// discovery rules periodically, and returns once ctx is cancelled and every
// worker has finished its batches in flight.
func (a *App) Run(ctx context.Context) error {
	srcs, err := a.Resolve(ctx)
	if err != nil {
		return err
	}
	var wg sync.WaitGroup
	defer wg.Wait()

	every := cmp.Or(a.historyEvery, historyEvery)
	a.mu.Lock()
	a.history = newHistory(every, a.sources, a.writeSamples, a.log)
	a.mu.Unlock()
	wg.Go(func() { a.history.run(ctx) })

	if a.cfg.Admin.Listen != "off" {
		token, err := a.cfg.Admin.BearerToken()
		if err != nil {
			return err
		}
		srv := admin.New(a.cfg.Admin.Listen, a.reg, a.ready, a.log).WithAPI(consoleAPI{a}, token)
		if err := srv.Listen(); err != nil {
			return fmt.Errorf("admin.listen: %w", err)
		}
		a.mu.Lock()
		a.adminAddr = srv.Addr()
		a.mu.Unlock()
		wg.Go(func() {
			if err := srv.Run(ctx); err != nil {
				a.log.Error("admin server", "err", err)
			}
		})
	}

	ls := &listeners{ctx: ctx, wg: &wg, start: func(db, channel string) driver.Listener {
		return a.dbs[db].(driver.Notifier).Listener(channel, a.log.With("database", db, "channel", channel))
	}}
	listenerFor := ls.get
	a.balancers = &balancers{ctx: ctx, wg: &wg, listen: func(db string) driver.Listener {
		if _, ok := a.dbs[db].(driver.Notifier); !ok {
			return nil
		}
		return listenerFor(db, a.cfg.RelaySchema)
	}}
	start := func(s *Source) error {
		// Discovery rules run concurrently: reserve the name first.
		r := newRunningSource(s.Config, s.Shards)
		a.mu.Lock()
		_, dup := a.running[s.Name]
		if !dup {
			a.running[s.Name] = r
		}
		a.mu.Unlock()
		if dup {
			return nil
		}
		// Prepare now, so that a source that cannot start (no sink, a
		// trigger required but missing) fails the start.
		build, err := a.prepare(ctx, s, listenerFor)
		if err != nil {
			a.mu.Lock()
			delete(a.running, s.Name)
			a.mu.Unlock()
			return err
		}
		a.log.Info("source started", "source", s.Name, "table", s.TableName(), "mode", s.Layout.Mode, "shards", len(s.Shards))
		if s.ClaimAdvice != "" {
			a.log.Warn("claims on this table cost more than their batch", "source", s.Name, "table", s.TableName(), "detail", s.ClaimAdvice)
		}
		if s.OrderGap != "" {
			a.log.Warn("per-key order is not provable on this table", "source", s.Name, "table", s.TableName(), "detail", s.OrderGap)
		}
		for i, sh := range s.Shards {
			wg.Go(func() {
				a.runLeased(ctx, s, sh, r.shards[i], build)
			})
		}
		return nil
	}
	for _, s := range srcs {
		if err := start(s); err != nil {
			return err
		}
	}
	for i, cs := range a.cfg.Sources {
		if cs.Discover == nil {
			continue
		}
		wg.Go(func() {
			t := time.NewTicker(cs.Discover.Interval.D())
			defer t.Stop()
			for {
				select {
				case <-ctx.Done():
					return
				case <-t.C:
				}
				found, err := a.resolveConfigSource(ctx, i, cs)
				if err != nil {
					a.log.Warn("discovery failed", "source", cs.Name, "err", err)
					continue
				}
				for _, s := range found {
					if err := start(s); err != nil {
						a.log.Error("start discovered source", "source", s.Name, "err", err)
					}
				}
			}
		})
	}
	<-ctx.Done()
	return nil
}

// prepare connects a source's sink and sets up its wake-up path; it returns
// what builds a worker on a shard's store each time the shard's lease is
// acquired.
func (a *App) prepare(ctx context.Context, s *Source, listenerFor func(db, channel string) driver.Listener) (func(Shard) *relay.Worker, error) {
	cs := s.Config
	snk, err := a.sink(cs.Sink)
	if err != nil {
		return nil, fmt.Errorf("sources[%d].sink: %w", s.Index, err)
	}
	if cs.MaxInFlight > 0 {
		snk = sink.Limit(snk, cs.MaxInFlight)
	}
	snk = a.patient(cs.Sink, snk, cs.Pipeline)
	routes := slices.Clone(s.Routes)
	for j := range routes {
		routes[j].SinkName = cs.Routes[j].Sink
		if f := cs.Routes[j].Schema; f != "" {
			sch, err := payloadschema.Load(f)
			if err != nil {
				return nil, fmt.Errorf("sources[%d].routes[%d].schema: %w", s.Index, j, err)
			}
			routes[j].Schema = sch
		}
		if routes[j].Sink, err = a.sink(cs.Routes[j].Sink); err != nil {
			return nil, fmt.Errorf("sources[%d].routes[%d].sink: %w", s.Index, j, err)
		}
		if n := cs.Routes[j].MaxInFlight; n > 0 {
			routes[j].Sink = sink.Limit(routes[j].Sink, n)
		}
		routes[j].Sink = a.patient(cs.Routes[j].Sink, routes[j].Sink, cs.Pipeline)
	}
	var wake <-chan struct{}
	if !s.Notifies() && cs.Notify == "on" {
		return nil, fmt.Errorf("sources[%d].notify: on needs PostgreSQL (LISTEN/NOTIFY); MySQL sources poll", s.Index)
	}
	if s.Layout.Queue != nil && cs.Notify != "off" && s.Notifies() {
		// The queue's own trigger notifies its channel.
		if ch := s.Layout.Queue.Archive.Channel; ch != "" {
			wake = listenerFor(cs.Database, ch).SubscribeAll()
		} else if cs.Notify == "on" {
			return nil, fmt.Errorf("sources[%d].notify: on, but the layout names no state.queue.channel", s.Index)
		}
	} else if cs.Notify != "off" && s.Notifies() {
		has, err := a.ensureTrigger(ctx, s)
		switch {
		case has:
			wake = listenerFor(cs.Database, a.cfg.RelaySchema).Subscribe(s.Table.Name())
		case cs.Notify == "on":
			return nil, fmt.Errorf("sources[%d].notify: on, but the wake-up trigger is missing on %s and could not be installed: %w", s.Index, s.Table, err)
		default:
			a.log.Info("no wake-up trigger; polling only", "source", s.Name, "reason", err)
		}
	}
	var schema relay.Validator
	if cs.Schema != "" {
		sch, err := payloadschema.Load(cs.Schema)
		if err != nil {
			return nil, fmt.Errorf("sources[%d].schema: %w", s.Index, err)
		}
		schema = sch
	}
	opts := relay.Options{
		Schema: schema,
		Name:   s.Name, Owner: a.owner, Store: s.Store, Sink: snk, SinkName: cs.Sink, Topic: s.Layout.Topic.String(), Headers: headerExtras(s.Layout), Routes: routes,
		BatchSize: cs.BatchSize, Pipeline: cs.Pipeline, Ordering: cs.Ordering == nil || *cs.Ordering,
		MaxAttempts: cs.MaxAttempts, Backoff: relay.Backoff{Initial: cs.Backoff.Initial.D(), Max: cs.Backoff.Max.D()},
		PollMin: cs.Poll.Min.D(), PollMax: cs.Poll.Max.D(), PollFallback: cs.Poll.Fallback.D(), Debounce: cs.Poll.Debounce.D(),
		ValidateJSON: s.Layout.PayloadJSON,
		Wake:         wake, ShutdownTimeout: a.cfg.Shutdown.Timeout.D(), StatsInterval: a.statsInterval,
		MaxOldestPending: cs.Readiness.MaxOldestPending.D(), MaxClaimFailure: cs.Readiness.MaxClaimFailure.D(),
		Metrics: a.metrics.Source(s.Name), Logger: a.log,
		Gate: a.scheduler(cs.Database).For(cs.Priority),
	}
	if cs.Delivery == config.DeliveryExactlyOnce {
		// One transactional producer serves the source: it is not split
		// (config refuses shards with exactly_once).
		build := a.exactlyOnce(s, opts)
		return func(Shard) *relay.Worker { return build() }, nil
	}
	return func(sh Shard) *relay.Worker {
		o := opts
		o.Store = sh.Store
		if sh.Bucket.Split() {
			o.Logger = a.log.With("shard", sh.Bucket.LeaseName(s.Name))
		}
		return relay.NewWorker(o)
	}, nil
}

// patient bounds how long a source's batches wait for sink name (its
// batch_wait): a call given up on goes on in the background, at most a
// pipeline of them at once.
func (a *App) patient(name string, p sink.Publisher, pipeline int) sink.Publisher {
	wait := a.cfg.Sinks[name].BatchWait.D()
	if wait <= 0 {
		return p
	}
	return sink.NewPatient(p, name, wait, pipeline)
}

// headerExtras are the layout's configured headers, for the relay.
func headerExtras(l *layout.Layout) []relay.HeaderExtra {
	var out []relay.HeaderExtra
	for _, h := range l.HeaderExtras {
		out = append(out, relay.HeaderExtra{Name: h.Name, Extra: h.Extra})
	}
	return out
}

// ensureTrigger reports whether the wake-up trigger is on the table,
// installing it when allowed.
func (a *App) ensureTrigger(ctx context.Context, s *Source) (bool, error) {
	t, ok := s.Table.(driver.Triggered)
	if !ok {
		return false, errors.New("the table cannot carry a wake-up trigger")
	}
	has, err := t.HasTrigger(ctx)
	if err != nil || has {
		return has, err
	}
	if s.Config.InstallTrigger != nil && !*s.Config.InstallTrigger {
		return false, errors.New("install_trigger is off")
	}
	if err := t.InstallTrigger(ctx); err != nil {
		return false, err
	}
	a.log.Info("installed the wake-up trigger", "source", s.Name, "table", s.Table.String())
	return true, nil
}

// listeners holds one NOTIFY listener per database and channel, started on
// first use.
// Discovery rules start sources concurrently, so it is locked.
type listeners struct {
	ctx   context.Context
	wg    *sync.WaitGroup
	start func(db, channel string) driver.Listener

	mu sync.Mutex
	by map[string]driver.Listener
}

func (ls *listeners) get(db, channel string) driver.Listener {
	ls.mu.Lock()
	defer ls.mu.Unlock()
	key := db + "\x00" + channel
	if l, ok := ls.by[key]; ok {
		return l
	}
	if ls.by == nil {
		ls.by = map[string]driver.Listener{}
	}
	l := ls.start(db, channel)
	ls.by[key] = l
	ls.wg.Go(func() { _ = l.Run(ls.ctx) })
	return l
}

func sleepCtx(ctx context.Context, d time.Duration) {
	t := time.NewTimer(d)
	defer t.Stop()
	select {
	case <-ctx.Done():
	case <-t.C:
	}
}
