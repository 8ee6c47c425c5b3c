package app

import (
	"context"
	"sync"
	"time"
)

// dbHealth is whether a database is in service, as this process last found
// it: err is why not (it could not be opened, migrated or its sources
// resolved, or it stopped answering), nil while it is; since is when that
// last changed. A source whose database is out of service is stuck with
// cause database_down, whatever its worker says.
type dbHealth struct {
	mu    sync.Mutex
	err   error
	since time.Time
}

// set records the database's state and reports whether it changed (from
// in service to out of it or back).
func (h *dbHealth) set(err error) bool {
	h.mu.Lock()
	defer h.mu.Unlock()
	changed := (h.err == nil) != (err == nil)
	if changed || h.since.IsZero() {
		h.since = time.Now()
	}
	h.err = err
	return changed
}

// get returns since when the database has been in or out of service, and
// why it is out of it (nil: it is in service).
func (h *dbHealth) get() (time.Time, error) {
	if h == nil {
		return time.Time{}, nil
	}
	h.mu.Lock()
	defer h.mu.Unlock()
	return h.since, h.err
}

// healthOf returns database name's health, created on first use.
func (a *App) healthOf(name string) *dbHealth {
	a.dbMu.Lock()
	defer a.dbMu.Unlock()
	h := a.health[name]
	if h == nil {
		h = &dbHealth{}
		a.health[name] = h
	}
	return h
}

// healthNow is database name's health as it stands, nil (in service) when
// it has none: a read that must not create one for a database let go.
func (a *App) healthNow(name string) (time.Time, error) {
	a.dbMu.RLock()
	h := a.health[name]
	a.dbMu.RUnlock()
	return h.get()
}

// probeEvery is how often a running database is pinged: a third of the
// lease TTL, the pace of its lease renewals.
func (a *App) probeEvery() time.Duration { return max(a.cfg.LeaseTTL.D()/3, 100*time.Millisecond) }

// probe pings database name every probeEvery until ctx ends, and records
// whether it answers: a database that stops answering makes its sources
// stuck (database_down) at once, and logs it; one that answers again
// clears it. Its sources recover by themselves meanwhile (their pool
// reconnects, their leases are acquired again).
func (a *App) probe(ctx context.Context, name string) {
	h := a.healthOf(name)
	every := a.probeEvery()
	t := time.NewTicker(every)
	defer t.Stop()
	for {
		select {
		case <-ctx.Done():
			return
		case <-t.C:
		}
		db, err := a.db(name)
		if err != nil {
			return // let go meanwhile
		}
		pctx, cancel := context.WithTimeout(ctx, every)
		err = db.Ping(pctx)
		cancel()
		if ctx.Err() != nil {
			return
		}
		if h.set(err) {
			if err != nil {
				a.log.Warn("database unreachable: its sources are stuck until it answers again", "database", name, "err", err)
			} else {
				a.log.Info("database answers again", "database", name)
			}
		}
	}
}
