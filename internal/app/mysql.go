package app

import (
	"context"
	"database/sql"
	"fmt"
	"time"

	"github.com/outbox-relay/outbox-relay/internal/config"
	"github.com/outbox-relay/outbox-relay/internal/layout"
	"github.com/outbox-relay/outbox-relay/internal/source/mysql"
)

// openMySQL opens the pool of a MySQL or MariaDB database. Its connections'
// wait_timeout is the shortest claim_timeout of the database's sources: a
// claim whose relay stopped talking is rolled back by the server after that
// long.
func (a *App) openMySQL(ctx context.Context, name string, db config.Database) (*sql.DB, error) {
	timeout := time.Duration(0)
	for _, s := range a.cfg.Sources {
		if s.Database == name && s.ClaimTimeout > 0 && (timeout == 0 || s.ClaimTimeout.D() < timeout) {
			timeout = s.ClaimTimeout.D()
		}
	}
	pool, err := mysql.OpenWith(db.DSN, mysql.ConnOptions{ClaimTimeout: timeout, Owner: a.owner})
	if err != nil {
		return nil, fmt.Errorf("databases.%s.dsn: %w", name, err)
	}
	pool.SetMaxOpenConns(db.MaxConns)
	if err := pool.PingContext(ctx); err != nil {
		_ = pool.Close()
		return nil, fmt.Errorf("databases.%s: connect: %w", name, err)
	}
	return pool, nil
}

// resolveMySQLTable checks a source's layout against its MySQL table and
// builds its store.
func (a *App) resolveMySQLTable(ctx context.Context, i int, cs config.Source, name string, t mysql.Table) (*Source, error) {
	path := fmt.Sprintf("sources[%d]", i)
	db := a.mysqlDBs[cs.Database]
	merged, explicit, err := layout.Merge(cs.Preset, cs.Layout, cs.Topic)
	if err != nil {
		return nil, fieldErr(path, err)
	}
	if err := t.Validate(); err != nil {
		return nil, fmt.Errorf("%s.%w", path, err)
	}
	cols, err := mysql.Columns(ctx, db, t)
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
	index, err := mysql.ClaimIndex(ctx, db, t, l)
	if err != nil {
		return nil, fmt.Errorf("%s.table: %w", path, err)
	}
	opts := mysql.Options{Source: name, Table: t, RelayDatabase: a.cfg.RelaySchema, Layout: l,
		Ordering: cs.Ordering == nil || *cs.Ordering, ClaimTimeout: cs.ClaimTimeout.D(), ClaimIndex: index}
	if err := opts.Validate(); err != nil {
		return nil, fmt.Errorf("%s.%w", path, err)
	}
	st := mysql.New(db, opts)
	return &Source{
		Name: name, Index: i, Config: cs, DSN: a.cfg.Databases[cs.Database].DSN, Layout: l, Routes: routes,
		Store: st, MySQL: &MySQLSource{DB: db, Table: t, Store: st}, OrderGap: orderGap(cs, l, cols, false),
	}, nil
}
