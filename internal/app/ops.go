package app

import (
	"context"
	"fmt"

	"github.com/outbox-relay/outbox-relay/internal/source"
	"github.com/outbox-relay/outbox-relay/internal/source/mysql"
	"github.com/outbox-relay/outbox-relay/internal/source/postgres"
)

// ListFailed lists the dead letters of database db that f selects.
func (a *App) ListFailed(ctx context.Context, db string, f source.DLQFilter) ([]source.FailedEvent, error) {
	if m, ok := a.mysqlDBs[db]; ok {
		return mysql.ListFailed(ctx, m, a.cfg.RelaySchema, f)
	}
	p, ok := a.pools[db]
	if !ok {
		return nil, fmt.Errorf("unknown database %q", db)
	}
	return postgres.ListFailed(ctx, p, a.cfg.RelaySchema, f)
}

// Replay puts dead letters of source s back into its table's pending set,
// recording actor in the audit table.
func (s *Source) Replay(ctx context.Context, events []source.FailedEvent, actor string) (int, error) {
	if s.MySQL != nil {
		return s.MySQL.Store.Replay(ctx, events, actor)
	}
	return s.PG.Replay(ctx, events, actor)
}

// CheckRelaySchema lists what the relay's own schema (a database on MySQL)
// lacks in database db for the relay to run.
func (a *App) CheckRelaySchema(ctx context.Context, db string) ([]string, error) {
	if m, ok := a.mysqlDBs[db]; ok {
		return mysql.CheckRelayDatabase(ctx, m, a.cfg.RelaySchema)
	}
	return postgres.CheckRelaySchema(ctx, a.pools[db], a.cfg.RelaySchema)
}

// Grants is what a source's layout needs on its table, and how the role's
// grants compare.
type Grants struct {
	Need, Missing, Extra []string
}

// CheckGrants compares the role's grants on the source's table with what
// its layout needs.
func (a *App) CheckGrants(ctx context.Context, s *Source) (Grants, error) {
	if s.MySQL != nil {
		need := s.Layout.NeededPrivileges()
		p, err := mysql.CheckPrivileges(ctx, s.MySQL.DB, s.MySQL.Table, need, s.Layout.UpdatedColumns()...)
		return Grants{Need: need, Missing: p.Missing, Extra: p.Extra}, err
	}
	need := s.Layout.NeededPrivileges()
	p, err := postgres.CheckPrivileges(ctx, s.Pool, s.Table, need, s.Layout.UpdatedColumns()...)
	return Grants{Need: need, Missing: p.Missing, Extra: p.Extra}, err
}
