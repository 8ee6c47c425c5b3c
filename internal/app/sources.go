package app

import (
	"context"
	"errors"
	"fmt"
	"regexp"
	"slices"
	"strings"

	"github.com/outbox-relay/outbox-relay/internal/config"
	"github.com/outbox-relay/outbox-relay/internal/layout"
	"github.com/outbox-relay/outbox-relay/internal/relay"
	"github.com/outbox-relay/outbox-relay/internal/source"
	"github.com/outbox-relay/outbox-relay/internal/source/driver"
)

// Source is one outbox table with its layout checked, ready to run.
type Source struct {
	Name   string
	Index  int // position in the config's sources
	Config config.Source
	DSN    string
	Layout *layout.Layout
	// Store claims and completes the source's batches, whatever the
	// driver; what else it can do (replay, mark published, settle, reap) is
	// found by interface assertion (see package driver).
	Store source.Store
	// Shards are the parts of the source relayed side by side, each by a
	// worker of its own under a lease of its own: one, the whole source
	// with Store, unless sources[].shards splits it into buckets.
	Shards []Shard
	// DB is the source's database and Table its table, with their
	// driver's capabilities (dead letters, retention, privileges, the
	// wake-up trigger).
	DB    driver.DB
	Table driver.Table
	// Routes are the source's routes with their columns checked against
	// the table (sinks are connected when the source starts).
	Routes []relay.Route
	// OrderGap says when rows of one key can leave in another order than
	// they were inserted, given the table's columns; empty when the order
	// is proven or ordering is off.
	OrderGap string
	// ClaimAdvice says what index the table lacks for its claims to cost
	// only their batch (see driver.ClaimAdvisor), or "".
	ClaimAdvice string
}

// Shard is one bucket of a source (sources[].shards) and the store that
// claims it.
type Shard struct {
	Bucket source.Bucket
	Store  source.Store
}

// openShards opens the store of each of n buckets of a source, or returns
// the whole source's store alone when n is 1.
func openShards(ctx context.Context, t driver.Table, p driver.SourceParams, whole source.Store, n int) ([]Shard, error) {
	if n <= 1 {
		return []Shard{{Store: whole}}, nil
	}
	out := make([]Shard, n)
	for i := range out {
		p.Bucket = source.Bucket{Index: i, Count: n}
		st, err := t.Open(ctx, p)
		if err != nil {
			return nil, fmt.Errorf("bucket %s: %w", p.Bucket, err)
		}
		out[i] = Shard{Bucket: p.Bucket, Store: st}
	}
	return out, nil
}

// unopened are the shards of a source split in n (sources[].shards) with
// no store: what stands for a source not yet started.
func unopened(n int) []Shard {
	out := make([]Shard, max(n, 1))
	for i := range out {
		if n > 1 {
			out[i].Bucket = source.Bucket{Index: i, Count: n}
		}
	}
	return out
}

// orderGap is layout.OrderGap for a source with per-key ordering on.
func orderGap(cs config.Source, l *layout.Layout, cols []layout.Column, statementOrder bool) string {
	if cs.Ordering != nil && !*cs.Ordering {
		return ""
	}
	return layout.OrderGap(l, cols, statementOrder)
}

// TableName is the source's table as its database quotes it.
func (s *Source) TableName() string { return s.Table.String() }

// Notifies says whether the source's database can wake the relay when
// rows arrive (LISTEN/NOTIFY).
func (s *Source) Notifies() bool {
	_, ok := s.DB.(driver.Notifier)
	return ok
}

// routeExtras checks each route's column and topic against the table and
// asks the layout to render them for every row.
func routeExtras(path string, rs []config.Route, l *layout.Layout, cols []layout.Column) ([]relay.Route, error) {
	for _, h := range l.HeaderExtras {
		if relay.IsReserved(h.Name) {
			return nil, fmt.Errorf("%s.layout.extra_headers.%s: the relay sets this header itself", path, h.Name)
		}
	}
	out := make([]relay.Route, len(rs))
	for j, r := range rs {
		p := fmt.Sprintf("%s.routes[%d]", path, j)
		out[j] = relay.Route{Name: r.Name, EventTypes: r.EventTypes, AggregateTypes: r.AggregateTypes,
			Values: r.Values, Column: -1, Topic: -1}
		if r.Column != "" {
			n, err := l.AddExtra("column", layout.Template{{Column: r.Column}}, cols)
			if err != nil {
				return nil, fmt.Errorf("%s.%w", p, err)
			}
			out[j].Column = n
		}
		if r.Topic != "" {
			t, err := layout.ParseTemplate(r.Topic)
			if err != nil {
				return nil, fmt.Errorf("%s.topic: %w", p, err)
			}
			n, err := l.AddExtra("topic", t, cols)
			if err != nil {
				return nil, fmt.Errorf("%s.%w", p, err)
			}
			out[j].Topic, out[j].TopicTemplate = n, r.Topic
		}
		if len(r.EventTypes) > 0 && l.EventType == "" {
			return nil, fmt.Errorf("%s.event_types: the layout has no event_type column", p)
		}
		if len(r.AggregateTypes) > 0 && l.AggregateType == "" {
			return nil, fmt.Errorf("%s.aggregate_types: the layout has no aggregate_type column", p)
		}
	}
	return out, nil
}

// Resolve lists every source of the configuration: listed tables, and the
// tables discovery finds now.
func (a *App) Resolve(ctx context.Context) ([]*Source, error) {
	out, errs := a.ResolveEach(ctx)
	if len(errs) > 0 {
		return nil, errs[0]
	}
	return out, nil
}

// ResolveEach resolves every configured source and returns those that
// resolved and an error for each that did not, naming it, so that one
// mistake does not hide the others. A source of a multi-database entry is
// resolved on each of the entry's databases this process has open.
func (a *App) ResolveEach(ctx context.Context) ([]*Source, []error) {
	return a.resolveWhere(ctx, func(string) bool { return true })
}

// resolveStatic is ResolveEach for the databases of the configuration
// alone: Run takes up the members of multi-database entries on their own.
func (a *App) resolveStatic(ctx context.Context) ([]*Source, []error) {
	return a.resolveWhere(ctx, func(db string) bool {
		_, _, member := config.SplitMemberName(db)
		return !member
	})
}

// resolveOn is ResolveEach for database db alone.
func (a *App) resolveOn(ctx context.Context, db string) ([]*Source, []error) {
	return a.resolveWhere(ctx, func(name string) bool { return name == db })
}

// resolveWhere resolves the sources, in the configuration's order, of the
// open databases that where keeps.
func (a *App) resolveWhere(ctx context.Context, where func(db string) bool) ([]*Source, []error) {
	var (
		out  []*Source
		errs []error
	)
	open := a.databaseNames()
	for i, cs := range a.cfg.Sources {
		for _, p := range a.placedOn(i, cs, open) {
			if !where(p.Source.Database) {
				continue
			}
			srcs, err := a.resolveConfigSource(ctx, i, p.Source)
			if err != nil {
				errs = append(errs, fmt.Errorf("source %q: %w", p.Source.Name, err))
				continue
			}
			out = append(out, srcs...)
		}
	}
	return out, errs
}

func (a *App) resolveConfigSource(ctx context.Context, i int, cs config.Source) ([]*Source, error) {
	path := fmt.Sprintf("sources[%d]", i)
	db, err := a.db(cs.Database)
	if err != nil {
		return nil, fmt.Errorf("%s.database: %w", path, err)
	}
	if cs.Discover == nil {
		schema, table, err := layout.ParseTableName(cs.Table)
		if err != nil {
			return nil, fmt.Errorf("%s.table: %w", path, err)
		}
		s, err := a.resolveTable(ctx, i, cs, cs.Name, driver.TableName{Schema: schema, Name: table})
		if err != nil {
			return nil, err
		}
		return []*Source{s}, nil
	}
	d, ok := db.(driver.Discoverer)
	if !ok {
		return nil, fmt.Errorf("%s.discover: discovery needs PostgreSQL; list MySQL tables one by one", path)
	}
	re, err := regexp.Compile(cs.Discover.Schemas)
	if err != nil {
		return nil, fmt.Errorf("%s.discover.schemas: %w", path, err)
	}
	tables, err := d.Discover(ctx, re, cs.Discover.Tables)
	if err != nil {
		return nil, fmt.Errorf("%s.discover: %w", path, err)
	}
	var out []*Source
	for _, t := range tables {
		s, err := a.resolveTable(ctx, i, cs, cs.Name+":"+t.Schema+"."+t.Name, t)
		if err != nil {
			return nil, err
		}
		out = append(out, s)
	}
	return out, nil
}

// resolveTable checks a source's layout against its table and builds its
// store. The driver's errors start with the field they are about.
func (a *App) resolveTable(ctx context.Context, i int, cs config.Source, name string, tn driver.TableName) (*Source, error) {
	path := fmt.Sprintf("sources[%d]", i)
	db, err := a.db(cs.Database)
	if err != nil {
		return nil, fmt.Errorf("%s.database: %w", path, err)
	}
	merge := layout.Merge
	if cs.Cursor() {
		merge = layout.MergeUntouched // the table is history: the relay never writes to it
	}
	merged, explicit, err := merge(cs.Preset, cs.Layout, cs.Topic)
	if err != nil {
		return nil, fieldErr(path, err)
	}
	t, err := db.Table(ctx, tn)
	if err != nil {
		return nil, fmt.Errorf("%s.%w", path, err)
	}
	cols := t.Columns()
	l, err := layout.Resolve(merged, explicit, t.String(), cols)
	if err != nil {
		return nil, fieldErr(path, err)
	}
	routes, err := routeExtras(path, cs.Routes, l, cols)
	if err != nil {
		return nil, err
	}
	prio, err := eventPriority(cs.EventPriority, l, cols)
	if err != nil {
		return nil, fmt.Errorf("%s.event_priority.%w", path, err)
	}
	params := driver.SourceParams{Source: name, Capture: cs.Capture, Layout: l, Ordering: cs.Ordering == nil || *cs.Ordering,
		ClaimTimeout: cs.ClaimTimeout.D(), Priority: prio, Metrics: a.metrics, Logger: a.log}
	st, err := t.Open(ctx, params)
	if err != nil {
		return nil, fmt.Errorf("%s.%w", path, err)
	}
	shards, err := openShards(ctx, t, params, st, cs.Shards)
	if err != nil {
		return nil, fmt.Errorf("%s.shards: %w", path, err)
	}
	conf, _ := a.dbConfig(cs.Database)
	s := &Source{Name: name, Index: i, Config: cs, DSN: conf.DSN, Layout: l, Routes: routes,
		Store: st, Shards: shards, DB: db, Table: t}
	if l.Queue == nil && !cs.WAL() { // the WAL orders every insert
		s.OrderGap = orderGap(cs, l, cols, t.StatementOrder())
	}
	if ca, ok := st.(driver.ClaimAdvisor); ok {
		s.ClaimAdvice = ca.ClaimAdvice()
	}
	return s, nil
}

// eventPriority is a source's event priority (nil for none) against its
// table: its column, the layout's event type unless it names one, must be
// one of the table's. An error starts with the field it is about.
func eventPriority(e *config.EventPriority, l *layout.Layout, cols []layout.Column) (*source.Priority, error) {
	if e == nil {
		return nil, nil
	}
	col := e.Column
	if col == "" {
		if col = l.EventType; col == "" {
			return nil, errors.New("column: the layout has no event_type column: name the column whose value is matched")
		}
	}
	if !slices.ContainsFunc(cols, func(c layout.Column) bool { return c.Name == col }) {
		return nil, fmt.Errorf("column: the table has no column %q", col)
	}
	p := &source.Priority{Column: col, Classes: e.Classes, Lookahead: e.Lookahead}
	return p, p.Validate()
}

// fieldErr prefixes a layout field error with the source's path.
func fieldErr(path string, err error) error {
	var fe *layout.FieldError
	if errors.As(err, &fe) {
		switch {
		case fe.Field == "preset":
			return fmt.Errorf("%s.preset: %s", path, fe.Msg)
		case fe.Field == "topic" && !strings.Contains(fe.Msg, "required"):
			return fmt.Errorf("%s.topic (or layout.topic): %s", path, fe.Msg)
		}
		return fmt.Errorf("%s.layout.%s: %s", path, fe.Field, fe.Msg)
	}
	return fmt.Errorf("%s: %w", path, err)
}
