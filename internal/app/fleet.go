package app

import (
	"context"
	"math/rand/v2"
	"sync"
	"time"

	"github.com/outbox-relay/outbox-relay/internal/config"
)

// How Run runs the members of multi-database entries: each has a
// supervisor that takes it up (open, migrate, resolve and start its
// sources), retrying with backoff while that fails, then probes it; a
// discovery entry is looked at again every interval, and the members that
// appeared are taken up, those that vanished let go.

// Backoff between attempts to take up a member that failed.
const (
	memberRetryMin = time.Second
	memberRetryMax = time.Minute
)

// runMember starts member m's supervisor, under Run's context.
func (a *App) runMember(rt *runtime, m *member) {
	a.dbMu.Lock()
	m.ctx, m.cancel = context.WithCancel(rt.ctx)
	a.dbMu.Unlock()
	a.placeholders(m)
	m.wg.Go(func() { a.superviseMember(rt, m) })
}

// superviseMember takes member m up, trying again with backoff while that
// fails (its sources wait, stuck with cause database_down), then probes it
// until it is let go.
func (a *App) superviseMember(rt *runtime, m *member) {
	ctx := m.ctx
	wait := memberRetryMin
	for {
		n, err := a.takeUp(rt, m)
		if err == nil {
			a.healthOf(m.Name).set(nil)
			a.log.Info("database in service", "database", m.Name, "sources", n)
			break
		}
		if ctx.Err() != nil {
			return
		}
		a.healthOf(m.Name).set(err)
		a.log.Warn("database out of service: its sources wait for it; trying again", "database", m.Name, "err", err,
			"retry_in", wait)
		sleepCtx(ctx, wait/2+rand.N(wait/2+1))
		if ctx.Err() != nil {
			return
		}
		wait = min(2*wait, memberRetryMax)
	}
	a.probe(ctx, m.Name)
}

// takeUp opens member m (unless it is open), migrates its relay schema
// (when Migrate ran), resolves its sources and starts them, and returns
// how many it started. It holds one of the slots that bound how many
// members are taken up at once.
func (a *App) takeUp(rt *runtime, m *member) (int, error) {
	ctx := m.ctx
	select {
	case a.slots <- struct{}{}:
		defer func() { <-a.slots }()
	case <-ctx.Done():
		return 0, ctx.Err()
	}
	if !a.HasDatabase(m.Name) {
		if err := a.openDB(ctx, m.Name, m.Database); err != nil {
			return 0, err
		}
	}
	a.dbMu.RLock()
	migrate := a.migrating
	a.dbMu.RUnlock()
	if migrate && !m.migrated {
		if err := a.migrateDB(ctx, m.Name, m.Database); err != nil {
			return 0, err
		}
		m.migrated = true
	}
	srcs, errs := a.resolveOn(ctx, m.Name)
	if len(errs) > 0 {
		return 0, errs[0]
	}
	for _, s := range srcs {
		if err := a.startSource(rt, s); err != nil {
			return 0, err
		}
	}
	for _, p := range a.cfg.SourcesOn(m.Name) {
		if p.Source.Discover != nil {
			m.wg.Go(func() { a.rediscover(rt, ctx, p) })
		}
	}
	a.dropPlaceholders(m.Name)
	return len(srcs), nil
}

// recheckMembers looks for entry's databases again every interval, takes
// up those that appeared and lets go those that vanished. A discovery that
// fails changes nothing: the databases found before keep running.
func (a *App) recheckMembers(rt *runtime, entry string) {
	t := time.NewTicker(a.cfg.Databases[entry].Discover.Interval.D())
	defer t.Stop()
	for {
		select {
		case <-rt.ctx.Done():
			return
		case <-t.C:
		}
		found, err := FindMembers(rt.ctx, a.cfg, entry)
		if rt.ctx.Err() != nil {
			return
		}
		a.setEntryErr(entry, err)
		if err != nil {
			a.log.Warn("database discovery failed; the databases found before keep running", "databases", entry, "err", err)
			continue
		}
		a.syncMembers(rt, entry, found)
	}
}

// syncMembers makes entry's members those found: new ones are taken up,
// vanished ones let go (side by side, each within the shutdown timeout).
func (a *App) syncMembers(rt *runtime, entry string, found []config.Member) {
	now := map[string]bool{}
	for _, f := range found {
		now[f.Name] = true
	}
	var gone sync.WaitGroup
	for _, m := range a.membersOf(entry) {
		if !now[m.Name] {
			gone.Go(func() { a.letGo(rt, m) })
		}
	}
	gone.Wait()
	for _, f := range found {
		a.dbMu.RLock()
		_, known := a.members[f.Name]
		a.dbMu.RUnlock()
		if !known {
			a.log.Info("database found: taking it up", "database", f.Name)
			a.runMember(rt, a.addMember(f))
		}
	}
}

// letGo stops member m's sources (their batches in flight finish, their
// leases are handed over), stops its listener, balancer and probe, and
// closes its connections.
func (a *App) letGo(rt *runtime, m *member) {
	a.log.Info("database gone: stopping its sources", "database", m.Name)
	a.dbMu.RLock()
	cancel := m.cancel
	a.dbMu.RUnlock()
	if cancel != nil {
		cancel()
	}
	m.wg.Wait()
	a.mu.Lock()
	var names []string
	for name, r := range a.running {
		if r.cs.Database == m.Name {
			delete(a.running, name)
			names = append(names, name)
		}
	}
	a.mu.Unlock()
	for _, name := range names {
		a.metrics.Forget(name)
	}
	stopped := len(names)
	a.dbMu.Lock()
	db := a.dbs[m.Name]
	delete(a.dbs, m.Name)
	delete(a.leases, m.Name)
	delete(a.health, m.Name)
	delete(a.members, m.Name)
	a.dbMu.Unlock()
	rt.listeners.forget(m.Name)
	a.balancers.forget(m.Name)
	a.forgetScheduler(m.Name)
	if db != nil {
		_ = db.Close()
	}
	a.log.Info("database let go: its sources stopped, its connections closed", "database", m.Name, "sources", stopped)
}

// waitMembers waits until everything run for every member has stopped
// (Run's context has ended).
func (a *App) waitMembers() {
	for _, m := range a.membersOf("") {
		m.wg.Wait()
	}
}

// placeholders stand for member m's sources until they start, so that
// readiness, status and the state gauge show them (starting, or stuck
// with cause database_down while the member is out of service). A source
// that discovers its tables is shown by its template's name on the member.
func (a *App) placeholders(m *member) {
	h := a.healthOf(m.Name)
	a.mu.Lock()
	defer a.mu.Unlock()
	for _, p := range a.cfg.SourcesOn(m.Name) {
		if _, ok := a.running[p.Source.Name]; !ok {
			r := newRunningSource(p.Source, unopened(p.Source.Shards))
			r.health, r.placeholder = h, true
			a.running[p.Source.Name] = r
		}
	}
}

// dropPlaceholders removes the placeholders of database db left once its
// sources have started (those of sources that discover their tables).
func (a *App) dropPlaceholders(db string) {
	a.mu.Lock()
	defer a.mu.Unlock()
	for name, r := range a.running {
		if r.placeholder && r.cs.Database == db {
			delete(a.running, name)
		}
	}
}
