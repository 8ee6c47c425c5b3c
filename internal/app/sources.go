package app

import (
	"context"
	"database/sql"
	"errors"
	"fmt"
	"regexp"
	"strings"

	"github.com/jackc/pgx/v5/pgxpool"

	"github.com/outbox-relay/outbox-relay/internal/config"
	"github.com/outbox-relay/outbox-relay/internal/layout"
	"github.com/outbox-relay/outbox-relay/internal/relay"
	"github.com/outbox-relay/outbox-relay/internal/source"
	"github.com/outbox-relay/outbox-relay/internal/source/mysql"
	"github.com/outbox-relay/outbox-relay/internal/source/postgres"
	"github.com/outbox-relay/outbox-relay/internal/source/queue"
)

// Source is one outbox table with its layout checked, ready to run.
type Source struct {
	Name   string
	Index  int // position in the config's sources
	Config config.Source
	DSN    string
	Layout *layout.Layout
	// Store claims and completes the source's batches, whatever the driver.
	Store source.Store
	// Pool, Table and PG are the PostgreSQL source's connections, table and
	// store (dead-letter replay, privilege checks, the wake-up trigger).
	Pool  *pgxpool.Pool
	Table postgres.Table
	PG    *postgres.Store
	// MySQL is set for a MySQL or MariaDB source.
	MySQL *MySQLSource
	// Queue is set for a PostgreSQL source in state mode queue (PG is nil).
	Queue *queue.Store
	// Routes are the source's routes with their columns checked against
	// the table (sinks are connected when the source starts).
	Routes []relay.Route
	// OrderGap says when rows of one key can leave in another order than
	// they were inserted, given the table's columns; empty when the order
	// is proven or ordering is off.
	OrderGap string
}

// orderGap is layout.OrderGap for a source with per-key ordering on.
func orderGap(cs config.Source, l *layout.Layout, cols []layout.Column, statementOrder bool) string {
	if cs.Ordering != nil && !*cs.Ordering {
		return ""
	}
	return layout.OrderGap(l, cols, statementOrder)
}

// MySQLSource is a MySQL or MariaDB source's connections, table and store.
type MySQLSource struct {
	DB    *sql.DB
	Table mysql.Table
	Store *mysql.Store
}

// TableName is the source's table as its database quotes it.
func (s *Source) TableName() string {
	if s.MySQL != nil {
		return s.MySQL.Table.String()
	}
	return s.Table.String()
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
// mistake does not hide the others.
func (a *App) ResolveEach(ctx context.Context) ([]*Source, []error) {
	var (
		out  []*Source
		errs []error
	)
	for i, cs := range a.cfg.Sources {
		srcs, err := a.resolveConfigSource(ctx, i, cs)
		if err != nil {
			errs = append(errs, fmt.Errorf("source %q: %w", cs.Name, err))
			continue
		}
		out = append(out, srcs...)
	}
	return out, errs
}

func (a *App) resolveConfigSource(ctx context.Context, i int, cs config.Source) ([]*Source, error) {
	path := fmt.Sprintf("sources[%d]", i)
	if _, ok := a.mysqlDBs[cs.Database]; ok {
		if cs.Discover != nil {
			return nil, fmt.Errorf("%s.discover: discovery needs PostgreSQL; list MySQL tables one by one", path)
		}
		schema, table, err := layout.ParseTableName(cs.Table)
		if err != nil {
			return nil, fmt.Errorf("%s.table: %w", path, err)
		}
		s, err := a.resolveMySQLTable(ctx, i, cs, cs.Name, mysql.Table{Schema: schema, Name: table})
		if err != nil {
			return nil, err
		}
		return []*Source{s}, nil
	}
	pool := a.pools[cs.Database]
	if pool == nil {
		return nil, fmt.Errorf("%s.database: unknown database %q", path, cs.Database)
	}
	if cs.Discover == nil {
		schema, table, err := layout.ParseTableName(cs.Table)
		if err != nil {
			return nil, fmt.Errorf("%s.table: %w", path, err)
		}
		s, err := a.resolveTable(ctx, i, cs, cs.Name, postgres.Table{Schema: schema, Name: table})
		if err != nil {
			return nil, err
		}
		return []*Source{s}, nil
	}
	re, err := regexp.Compile(cs.Discover.Schemas)
	if err != nil {
		return nil, fmt.Errorf("%s.discover.schemas: %w", path, err)
	}
	tables, err := postgres.Discover(ctx, pool, re, cs.Discover.Tables)
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

func (a *App) resolveTable(ctx context.Context, i int, cs config.Source, name string, t postgres.Table) (*Source, error) {
	path := fmt.Sprintf("sources[%d]", i)
	pool := a.pools[cs.Database]
	merged, explicit, err := layout.Merge(cs.Preset, cs.Layout, cs.Topic)
	if err != nil {
		return nil, fieldErr(path, err)
	}
	cols, err := postgres.Columns(ctx, pool, t)
	if err != nil {
		return nil, fmt.Errorf("%s.table: %w", path, err)
	}
	l, err := layout.Resolve(merged, explicit, t.String(), cols)
	if err != nil {
		return nil, fieldErr(path, err)
	}
	routes, err := routeExtras(path, cs.Routes, l, cols)
	if err != nil {
		return nil, err
	}
	if l.Queue != nil {
		qs, err := a.newQueueSource(ctx, i, cs, name, t, l)
		if err != nil {
			return nil, err
		}
		return &Source{Name: name, Index: i, Config: cs, Pool: pool, DSN: a.cfg.Databases[cs.Database].DSN, Table: t, Layout: l,
			Routes: routes, Store: qs, Queue: qs}, nil
	}
	ordering := cs.Ordering == nil || *cs.Ordering
	st := postgres.New(pool, postgres.Options{Source: name, Table: t, RelaySchema: a.cfg.RelaySchema, Layout: l, Ordering: ordering,
		ClaimTimeout: cs.ClaimTimeout.D()})
	return &Source{
		Name: name, Index: i, Config: cs, Pool: pool, DSN: a.cfg.Databases[cs.Database].DSN, Table: t, Layout: l, Routes: routes,
		Store: st, PG: st, OrderGap: orderGap(cs, l, cols, true),
	}, nil
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
