package app

import (
	"cmp"
	"context"
	"errors"
	"fmt"
	"maps"
	"slices"
	"strings"
	"time"

	"github.com/outbox-relay/outbox-relay/internal/config"
	"github.com/outbox-relay/outbox-relay/internal/lease"
	"github.com/outbox-relay/outbox-relay/internal/relay"
	"github.com/outbox-relay/outbox-relay/internal/source/driver"
)

// The databases this process runs, by name: those of the configuration
// (databases.<name> with a dsn) and the members of its multi-database
// entries (<entry>/<database>, see members.go), which come and go while
// Run runs. a.dbs, a.leases, a.health and a.members are guarded by
// a.dbMu.

// driverOf returns the registered driver that database name names.
func driverOf(name string, db config.Database) (driver.Driver, error) {
	d, ok := driver.Lookup(cmp.Or(db.Driver, config.DefaultDatabaseDriver))
	if !ok {
		return nil, fmt.Errorf("databases.%s.driver: %q is not supported", name, db.Driver)
	}
	return d, nil
}

// dbPath is the field path that names database name in errors: its
// entry's for a member.
func dbPath(name string) string {
	if entry, _, ok := config.SplitMemberName(name); ok {
		return "databases." + entry + " (" + name + ")"
	}
	return "databases." + name
}

// openDB connects to database name through its driver, and takes its lease
// table.
func (a *App) openDB(ctx context.Context, name string, db config.Database) error {
	d, err := driverOf(name, db)
	if err != nil {
		return err
	}
	// A claim whose relay stopped talking ends after the shortest
	// claim_timeout of the database's sources.
	timeout := time.Duration(0)
	for _, p := range a.cfg.SourcesOn(name) {
		if s := p.Source; s.ClaimTimeout > 0 && (timeout == 0 || s.ClaimTimeout.D() < timeout) {
			timeout = s.ClaimTimeout.D()
		}
	}
	h, err := d.Open(ctx, driver.OpenParams{DSN: db.DSN, MaxConns: db.MaxConns, RelaySchema: a.cfg.RelaySchema,
		Owner: a.owner, ClaimTimeout: timeout, Tracer: a.tracer})
	if fe := (*driver.FieldError)(nil); errors.As(err, &fe) {
		return fmt.Errorf("%s.%w", dbPath(name), err)
	} else if err != nil {
		return fmt.Errorf("%s: %w", dbPath(name), err)
	}
	l, ok := h.(driver.Leaser)
	if !ok {
		_ = h.Close()
		return fmt.Errorf("%s.driver: %s has no lease table", dbPath(name), db.Driver)
	}
	a.dbMu.Lock()
	a.dbs[name] = h
	a.leases[name] = l.Leases()
	if a.health[name] == nil {
		a.health[name] = &dbHealth{}
	}
	a.dbMu.Unlock()
	return nil
}

// db returns the named database, or an error naming it.
func (a *App) db(name string) (driver.DB, error) {
	a.dbMu.RLock()
	db, ok := a.dbs[name]
	a.dbMu.RUnlock()
	if !ok {
		return nil, fmt.Errorf("unknown database %q", name)
	}
	return db, nil
}

// leasesOf returns database name's lease table for this process.
func (a *App) leasesOf(name string) *lease.Leases {
	a.dbMu.RLock()
	defer a.dbMu.RUnlock()
	return a.leases[name]
}

// dbConfig returns the settings of database name: a database of the
// configuration, or a member this process knows.
func (a *App) dbConfig(name string) (config.Database, bool) {
	if _, _, member := config.SplitMemberName(name); !member {
		db, ok := a.cfg.Databases[name]
		return db, ok && !db.Multi()
	}
	a.dbMu.RLock()
	defer a.dbMu.RUnlock()
	if m, ok := a.members[name]; ok {
		return m.Database, true
	}
	return config.Database{}, false
}

// databaseNames lists, sorted, the databases this process has open: those
// of the configuration and the members it reached.
func (a *App) databaseNames() []string {
	a.dbMu.RLock()
	defer a.dbMu.RUnlock()
	return slices.Sorted(maps.Keys(a.dbs))
}

// DatabaseNames lists, sorted, the databases this process has open: those
// of the configuration and the members of its multi-database entries
// (<entry>/<database>) it found and reached.
func (a *App) DatabaseNames() []string { return a.databaseNames() }

// servingNames is databaseNames without the members out of service:
// where the relay's own tables can be read (dead letters, status).
func (a *App) servingNames() []string {
	var out []string
	for _, name := range a.databaseNames() {
		if _, _, member := config.SplitMemberName(name); member {
			if _, err := a.healthNow(name); err != nil {
				continue
			}
		}
		out = append(out, name)
	}
	return out
}

// belongs reports whether source (a name as the relay's tables record it)
// runs on database db, a member of a multi-database entry. On MySQL the
// members of one server share the relay's database, so its tables hold
// the other members' sources too.
func (a *App) belongs(db, source string) bool {
	for _, p := range a.cfg.SourcesOn(db) {
		if source == p.Source.Name || strings.HasPrefix(source, p.Source.Name+":") {
			return true
		}
	}
	return false
}

// HasDatabase reports whether name is a database this process has open: a
// database of the configuration, or a member of a multi-database entry
// (<entry>/<database>) it found and reached.
func (a *App) HasDatabase(name string) bool {
	_, err := a.db(name)
	return err == nil
}

// capability returns database name as C, or an error saying its driver
// cannot do what.
func capability[C any](a *App, name, what string) (C, error) {
	var zero C
	db, err := a.db(name)
	if err != nil {
		return zero, err
	}
	c, ok := db.(C)
	if !ok {
		conf, _ := a.dbConfig(name)
		return zero, fmt.Errorf("%s: the %s driver cannot %s", dbPath(name), conf.Driver, what)
	}
	return c, nil
}

// scheduler is database name's claim scheduler: the places its batches
// claim in turn, by priority (sources[].priority), leaving two of the
// database's connections to the stats, leases and retention.
//
// A member's scheduler is sized from its own settings, and forgotten when
// the member is let go (forgetScheduler).
func (a *App) scheduler(name string) *relay.Scheduler {
	conf, _ := a.dbConfig(name)
	a.mu.Lock()
	defer a.mu.Unlock()
	if s, ok := a.schedulers[name]; ok {
		return s
	}
	s := relay.NewScheduler(conf.MaxConns - 2)
	a.schedulers[name] = s
	return s
}

// forgetScheduler drops database name's scheduler, so that a database of
// the same name found later gets a new one.
func (a *App) forgetScheduler(name string) {
	a.mu.Lock()
	defer a.mu.Unlock()
	delete(a.schedulers, name)
}
