package app

import (
	"cmp"
	"context"
	"errors"
	"fmt"
	"time"

	"github.com/outbox-relay/outbox-relay/internal/config"
	"github.com/outbox-relay/outbox-relay/internal/relay"
	"github.com/outbox-relay/outbox-relay/internal/source/driver"
)

// driverOf returns the registered driver that database name names.
func driverOf(name string, db config.Database) (driver.Driver, error) {
	d, ok := driver.Lookup(cmp.Or(db.Driver, config.DefaultDatabaseDriver))
	if !ok {
		return nil, fmt.Errorf("databases.%s.driver: %q is not supported", name, db.Driver)
	}
	return d, nil
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
	for _, s := range a.cfg.Sources {
		if s.Database == name && s.ClaimTimeout > 0 && (timeout == 0 || s.ClaimTimeout.D() < timeout) {
			timeout = s.ClaimTimeout.D()
		}
	}
	h, err := d.Open(ctx, driver.OpenParams{DSN: db.DSN, MaxConns: db.MaxConns, RelaySchema: a.cfg.RelaySchema,
		Owner: a.owner, ClaimTimeout: timeout, Tracer: a.tracer})
	if fe := (*driver.FieldError)(nil); errors.As(err, &fe) {
		return fmt.Errorf("databases.%s.%w", name, err)
	} else if err != nil {
		return fmt.Errorf("databases.%s: %w", name, err)
	}
	a.dbs[name] = h
	l, ok := h.(driver.Leaser)
	if !ok {
		return fmt.Errorf("databases.%s.driver: %s has no lease table", name, db.Driver)
	}
	a.leases[name] = l.Leases()
	return nil
}

// db returns the named database, or an error naming it.
func (a *App) db(name string) (driver.DB, error) {
	db, ok := a.dbs[name]
	if !ok {
		return nil, fmt.Errorf("unknown database %q", name)
	}
	return db, nil
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
		return zero, fmt.Errorf("databases.%s: the %s driver cannot %s", name, a.cfg.Databases[name].Driver, what)
	}
	return c, nil
}

// scheduler is database name's claim scheduler: the places its batches
// claim in turn, by priority (sources[].priority), leaving two of the
// database's connections to the stats, leases and retention.
func (a *App) scheduler(name string) *relay.Scheduler {
	a.mu.Lock()
	defer a.mu.Unlock()
	if s, ok := a.schedulers[name]; ok {
		return s
	}
	s := relay.NewScheduler(a.cfg.Databases[name].MaxConns - 2)
	a.schedulers[name] = s
	return s
}
