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
	// health is its database's: out of service, the source is stuck
	// (database_down) whatever its shards say.
	health *dbHealth
	// placeholder marks an entry that stands for a source of a database
	// not yet taken up (see placeholders).
	placeholder bool
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

// runtime is what Run shares with what it starts: its context and wait
// group, and the NOTIFY listeners.
type runtime struct {
	ctx       context.Context
	wg        *sync.WaitGroup
	listeners *listeners
}

// scope is where the goroutines of database db run: a member's context
// and wait group (they end when it is let go), else Run's.
func (a *App) scope(rt *runtime, db string) (context.Context, *sync.WaitGroup) {
	a.dbMu.RLock()
	defer a.dbMu.RUnlock()
	if m := a.members[db]; m != nil && m.ctx != nil {
		return m.ctx, &m.wg
	}
	return rt.ctx, rt.wg
}

// Run starts the admin server, the listeners and every source, takes up
// the databases of multi-database entries, re-checks discovery rules
// periodically, and returns once ctx is cancelled and every worker has
// finished its batches in flight. A source of a database of the
// configuration that cannot start fails Run; a database of a
// multi-database entry that cannot be taken up holds up only its own
// sources, and is tried again.
func (a *App) Run(ctx context.Context) error {
	srcs, errs := a.resolveStatic(ctx)
	if len(errs) > 0 {
		return errs[0]
	}
	var wg sync.WaitGroup
	defer a.waitMembers()
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

	rt := &runtime{ctx: ctx, wg: &wg}
	rt.listeners = &listeners{scope: func(db string) (context.Context, *sync.WaitGroup) { return a.scope(rt, db) },
		start: func(db, channel string) driver.Listener {
			d, _ := a.db(db)
			return d.(driver.Notifier).Listener(channel, a.log.With("database", db, "channel", channel))
		}}
	a.balancers = &balancers{scope: rt.listeners.scope, listen: func(db string) driver.Listener {
		if !a.listens(db) {
			return nil
		}
		return rt.listeners.get(db, a.cfg.RelaySchema)
	}}
	for _, s := range srcs {
		if err := a.startSource(rt, s); err != nil {
			return err
		}
	}
	for _, name := range a.databaseNames() {
		if _, _, member := config.SplitMemberName(name); !member {
			wg.Go(func() { a.probe(ctx, name) })
			for _, p := range a.cfg.SourcesOn(name) {
				if p.Source.Discover != nil {
					wg.Go(func() { a.rediscover(rt, ctx, p) })
				}
			}
		}
	}
	for _, m := range a.membersOf("") {
		a.runMember(rt, m)
	}
	for _, entry := range multiEntries(a.cfg) {
		if a.cfg.Databases[entry].Discover != nil {
			wg.Go(func() { a.recheckMembers(rt, entry) })
		}
	}
	<-ctx.Done()
	return nil
}

// startSource starts relaying source s: it reserves its name, prepares it
// (so that a source that cannot start, for want of its sink or of a
// trigger it requires, fails here), and runs each of its shards under the
// shard's lease in its database's scope. A source already running is left
// as it is; one that stood in for it until its database was taken up is
// replaced.
func (a *App) startSource(rt *runtime, s *Source) error {
	r := newRunningSource(s.Config, s.Shards)
	r.health = a.healthOf(s.Config.Database)
	a.mu.Lock()
	old, dup := a.running[s.Name]
	if dup && old.placeholder {
		dup = false
	}
	if !dup {
		a.running[s.Name] = r
	}
	a.mu.Unlock()
	if dup {
		return nil
	}
	ctx, wg := a.scope(rt, s.Config.Database)
	build, err := a.prepare(ctx, s, rt.listeners.get)
	if err != nil {
		a.mu.Lock()
		if old != nil {
			a.running[s.Name] = old
		} else {
			delete(a.running, s.Name)
		}
		a.mu.Unlock()
		return err
	}
	a.log.Info("source started", "source", s.Name, "table", s.TableName(), "capture", s.Config.Capture, "mode", s.Layout.Mode, "shards", len(s.Shards))
	if s.ClaimAdvice != "" {
		a.log.Warn("claims on this table cost more than their batch", "source", s.Name, "table", s.TableName(), "detail", s.ClaimAdvice)
	}
	if s.OrderGap != "" {
		a.log.Warn("per-key order is not provable on this table", "source", s.Name, "table", s.TableName(), "detail", s.OrderGap)
	}
	for i, sh := range s.Shards {
		wg.Go(func() { a.runLeased(ctx, s, sh, r.shards[i], build) })
	}
	return nil
}

// rediscover looks for the tables of source p (one that discovers them by
// schema) again every discover.interval, until ctx ends, and starts those
// that appeared.
func (a *App) rediscover(rt *runtime, ctx context.Context, p config.Placed) {
	cs := p.Source
	t := time.NewTicker(cs.Discover.Interval.D())
	defer t.Stop()
	for {
		select {
		case <-ctx.Done():
			return
		case <-t.C:
		}
		found, err := a.resolveConfigSource(ctx, p.Index, cs)
		if err != nil {
			if ctx.Err() == nil {
				a.log.Warn("discovery failed", "source", cs.Name, "err", err)
			}
			continue
		}
		for _, s := range found {
			if err := a.startSource(rt, s); err != nil {
				a.log.Error("start discovered source", "source", s.Name, "err", err)
			}
		}
	}
}

// listens says whether database db keeps a connection listening for
// notifications: when its driver can notify and one of its sources may be
// woken by them (notify not off). Its balancer then hears of hand-overs at
// once; without, at its next attempt (a third of lease_ttl).
func (a *App) listens(db string) bool {
	d, err := a.db(db)
	if err != nil {
		return false
	}
	if _, ok := d.(driver.Notifier); !ok {
		return false
	}
	for _, p := range a.cfg.SourcesOn(db) {
		if p.Source.Notify != "off" {
			return true
		}
	}
	return false
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
	}
	patient := a.patientSinks(cs, snk, routes)
	var wake <-chan struct{}
	if !s.Notifies() && cs.Notify == "on" {
		return nil, fmt.Errorf("sources[%d].notify: on needs PostgreSQL (LISTEN/NOTIFY); MySQL sources poll", s.Index)
	}
	if w, ok := s.Store.(driver.Waker); ok {
		wake = w.Wake() // the store learns of rows itself (capture wal)
	} else if s.Layout.Queue != nil && cs.Notify != "off" && s.Notifies() {
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
	snk, routes = patient(0)
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
		o.Sink, o.Routes = patient(sh.Bucket.Index)
		if sh.Bucket.Split() {
			o.Logger = a.log.With("shard", sh.Bucket.LeaseName(s.Name))
		}
		return relay.NewWorker(o)
	}, nil
}

// patientSinks returns the sink of a source and its routes' sinks made
// patient (see patient) for a bucket of the source (0 for the whole
// source). Each bucket has its own, as its worker has its own pipeline:
// sinks shared by the buckets spent their budget of a pipeline of calls on
// the batches of every bucket, and held the rest of the source's batches
// until the next claim (rows the engine holds, recorded in retry_state). A
// bucket keeps its sinks across its workers (one each time this process
// acquires its lease): they remember the calls they gave up on.
func (a *App) patientSinks(cs config.Source, snk sink.Publisher, routes []relay.Route) func(bucket int) (sink.Publisher, []relay.Route) {
	type sinks struct {
		sink   sink.Publisher
		routes []relay.Route
	}
	var (
		mu   sync.Mutex
		made = map[int]sinks{}
	)
	return func(bucket int) (sink.Publisher, []relay.Route) {
		mu.Lock()
		defer mu.Unlock()
		p, ok := made[bucket]
		if !ok {
			p = sinks{sink: a.patient(cs.Sink, snk, cs.Pipeline), routes: slices.Clone(routes)}
			for j := range p.routes {
				p.routes[j].Sink = a.patient(cs.Routes[j].Sink, routes[j].Sink, cs.Pipeline)
			}
			made[bucket] = p
		}
		return p.sink, p.routes
	}
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
// first use in its database's scope (it stops when the database is let
// go). Discovery rules start sources concurrently, so it is locked.
type listeners struct {
	scope func(db string) (context.Context, *sync.WaitGroup)
	start func(db, channel string) driver.Listener

	mu sync.Mutex
	by map[string]map[string]driver.Listener // by database, then channel
}

func (ls *listeners) get(db, channel string) driver.Listener {
	ls.mu.Lock()
	defer ls.mu.Unlock()
	if l, ok := ls.by[db][channel]; ok {
		return l
	}
	if ls.by == nil {
		ls.by = map[string]map[string]driver.Listener{}
	}
	if ls.by[db] == nil {
		ls.by[db] = map[string]driver.Listener{}
	}
	l := ls.start(db, channel)
	ls.by[db][channel] = l
	ctx, wg := ls.scope(db)
	wg.Go(func() { _ = l.Run(ctx) })
	return l
}

// forget drops database db's listeners (stopped with its scope), so that a
// database of the same name found later gets new ones.
func (ls *listeners) forget(db string) {
	ls.mu.Lock()
	defer ls.mu.Unlock()
	delete(ls.by, db)
}

func sleepCtx(ctx context.Context, d time.Duration) {
	t := time.NewTimer(d)
	defer t.Stop()
	select {
	case <-ctx.Done():
	case <-t.C:
	}
}
