package app

import (
	"context"
	"fmt"
	"maps"
	"slices"
	"sync"

	"github.com/outbox-relay/outbox-relay/internal/config"
	"github.com/outbox-relay/outbox-relay/internal/source/driver"
)

// A multi-database entry (databases.<name>.dsns or .discover) stands for
// many databases, its members. Package config holds the rule of what an
// entry expands to (names, settings, sources); this file finds the members
// and opens them, and fleet.go runs them: each is opened, migrated and its
// sources started on its own, and one that cannot be reached holds up only
// its own sources.

// member is a database of a multi-database entry that this process knows.
type member struct {
	config.Member
	// ctx ends when the member is let go (its database vanished, or Run
	// ended); wg waits for everything run for it: its sources, their
	// schema discovery, its listener and balancer, its probe. Both are set
	// when Run takes the member up.
	ctx    context.Context
	cancel context.CancelFunc
	wg     sync.WaitGroup
	// migrated is set once its relay schema is migrated (its supervisor
	// alone touches it).
	migrated bool
}

// memberSlots bounds how many members are opened, migrated and resolved at
// once: hundreds of them must not all connect at the same moment.
const memberSlots = 8

// FindMembers lists the databases of multi-database entry entry now: its
// dsns, or those its discovery finds on its server, named and configured
// as package config says.
func FindMembers(ctx context.Context, cfg *config.Config, entry string) ([]config.Member, error) {
	db, ok := cfg.Databases[entry]
	if !ok || !db.Multi() {
		return nil, fmt.Errorf("databases.%s: not an entry of several databases", entry)
	}
	d, err := driverOf(entry, db)
	if err != nil {
		return nil, err
	}
	en, ok := d.(driver.Enumerator)
	if !ok {
		return nil, fmt.Errorf("databases.%s.driver: %s cannot name databases", entry, db.Driver)
	}
	var out []config.Member
	if len(db.DSNs) > 0 {
		seen := map[string]int{}
		for i, dsn := range db.DSNs {
			name, err := en.DatabaseName(dsn)
			if err != nil {
				return nil, fmt.Errorf("databases.%s.dsns[%d]: %w", entry, i, err)
			}
			if j, dup := seen[name]; dup {
				return nil, fmt.Errorf("databases.%s.dsns[%d]: names database %q, as dsns[%d] does: each database of an entry is named after its own database, so list it in another entry",
					entry, i, name, j)
			}
			seen[name] = i
			out = append(out, cfg.Member(entry, name, dsn))
		}
		return out, nil
	}
	match, err := db.Discover.Matcher()
	if err != nil {
		return nil, fmt.Errorf("databases.%s.discover.pattern: %w", entry, err)
	}
	names, err := en.ListDatabases(ctx, driver.ListParams{DSN: db.DSN, Query: db.Discover.Query, RelaySchema: cfg.RelaySchema})
	if err != nil {
		return nil, fmt.Errorf("databases.%s.discover: %w", entry, err)
	}
	seen := map[string]bool{}
	for _, name := range names {
		if !match(name) || seen[name] {
			continue
		}
		seen[name] = true
		dsn, err := en.WithDatabase(db.DSN, name)
		if err != nil {
			return nil, fmt.Errorf("databases.%s.dsn: %w", entry, err)
		}
		out = append(out, cfg.Member(entry, name, dsn))
	}
	return out, nil
}

// Target is a database by name, configured: one of the configuration, or a
// member of a multi-database entry.
type Target struct {
	Name     string
	Database config.Database
}

// Member reports whether the target is a member of a multi-database entry.
func (t Target) Member() bool {
	_, _, ok := config.SplitMemberName(t.Name)
	return ok
}

// Databases lists, sorted, the databases of cfg now: each database of the
// configuration and each member its multi-database entries list or
// discover. An entry whose members cannot be found is an error naming it.
func Databases(ctx context.Context, cfg *config.Config) ([]Target, error) {
	var out []Target
	for _, name := range slices.Sorted(maps.Keys(cfg.Databases)) {
		db := cfg.Databases[name]
		if !db.Multi() {
			out = append(out, Target{Name: name, Database: db})
			continue
		}
		ms, err := FindMembers(ctx, cfg, name)
		if err != nil {
			return nil, err
		}
		for _, m := range ms {
			out = append(out, Target{Name: m.Name, Database: m.Database})
		}
	}
	return out, nil
}

// multiEntries lists the configuration's multi-database entries, sorted.
func multiEntries(cfg *config.Config) []string {
	var out []string
	for _, name := range slices.Sorted(maps.Keys(cfg.Databases)) {
		if cfg.Databases[name].Multi() {
			out = append(out, name)
		}
	}
	return out
}

// openMembers finds the members of every multi-database entry and opens
// them, several at a time. A member that cannot be opened is recorded out
// of service, not an error: Run keeps trying it. A discovery that fails is
// recorded and logged (Run looks again at its interval); a listed dsn that
// names no database is an error, as a configuration mistake.
func (a *App) openMembers(ctx context.Context) error {
	var found []*member
	for _, entry := range multiEntries(a.cfg) {
		ms, err := FindMembers(ctx, a.cfg, entry)
		if err != nil {
			if len(a.cfg.Databases[entry].DSNs) > 0 {
				return err
			}
			a.log.Warn("database discovery failed; looking again at its interval", "databases", entry, "err", err)
			a.setEntryErr(entry, err)
			continue
		}
		for _, m := range ms {
			found = append(found, a.addMember(m))
		}
	}
	var wg sync.WaitGroup
	slots := make(chan struct{}, memberSlots)
	for _, m := range found {
		wg.Go(func() {
			slots <- struct{}{}
			defer func() { <-slots }()
			if err := a.openDB(ctx, m.Name, m.Database); err != nil {
				a.healthOf(m.Name).set(err)
				a.log.Warn("database unreachable; its sources wait for it", "database", m.Name, "err", err)
			}
		})
	}
	wg.Wait()
	return nil
}

// addMember registers a member found, and returns it.
func (a *App) addMember(cm config.Member) *member {
	a.dbMu.Lock()
	defer a.dbMu.Unlock()
	if m, ok := a.members[cm.Name]; ok {
		return m
	}
	m := &member{Member: cm}
	a.members[cm.Name] = m
	if a.health[cm.Name] == nil {
		a.health[cm.Name] = &dbHealth{}
	}
	return m
}

// membersOf lists the members of entry this process knows (every entry's
// when entry is ""), sorted by name.
func (a *App) membersOf(entry string) []*member {
	a.dbMu.RLock()
	defer a.dbMu.RUnlock()
	var out []*member
	for _, name := range slices.Sorted(maps.Keys(a.members)) {
		if m := a.members[name]; entry == "" || m.Entry == entry {
			out = append(out, m)
		}
	}
	return out
}

// setEntryErr records why entry's databases could not be found (nil: they
// were).
func (a *App) setEntryErr(entry string, err error) {
	a.dbMu.Lock()
	defer a.dbMu.Unlock()
	if err == nil {
		delete(a.entryErrs, entry)
	} else {
		a.entryErrs[entry] = err
	}
}

// DatabaseProblems lists what keeps databases of multi-database entries
// out of service: a discovery that failed, a member that cannot be opened
// (or, while Run runs, migrated, resolved or reached), each naming the
// database.
func (a *App) DatabaseProblems() []error {
	a.dbMu.RLock()
	var errs []error
	for _, entry := range slices.Sorted(maps.Keys(a.entryErrs)) {
		errs = append(errs, a.entryErrs[entry])
	}
	names := slices.Sorted(maps.Keys(a.members))
	a.dbMu.RUnlock()
	for _, name := range names {
		if _, err := a.healthNow(name); err != nil {
			errs = append(errs, fmt.Errorf("database %s is out of service: %w", name, err))
		}
	}
	return errs
}
