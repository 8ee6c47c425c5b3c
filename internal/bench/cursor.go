package bench

import (
	"context"
	"fmt"
	"slices"

	"github.com/outbox-relay/outbox-relay/internal/app"
	"github.com/outbox-relay/outbox-relay/internal/config"
)

// cursorColumn is the xid8 column of a table drained by capture cursor.
const cursorColumn = "tx"

// cursorDDL adds to the layout mark's table what capture cursor reads it by:
// each row's transaction, and the index of the claims' order.
const cursorDDL = `
ALTER TABLE %[1]s.outbox ADD COLUMN ` + cursorColumn + ` XID8 NOT NULL DEFAULT pg_current_xact_id();
CREATE INDEX outbox_cursor ON %[1]s.outbox (` + cursorColumn + `, id);`

// cursor says whether the drain's relay reads by capture cursor.
func (o Options) cursor() bool { return o.Capture == config.CaptureCursor }

// checkCapture checks what --capture asks: cursor drains the table of
// layout mark on PostgreSQL, whose claim+UPDATE loop is its ceiling.
func (o *Options) checkCapture() error {
	switch o.Capture {
	case "", config.CapturePoll:
		return nil
	case config.CaptureCursor:
	default:
		return fmt.Errorf("unknown capture %q (have: poll, cursor)", o.Capture)
	}
	switch {
	case o.Workload != "drain" || o.Driver == "mysql":
		return fmt.Errorf("--capture cursor applies to the drain workload on PostgreSQL")
	case len(o.Presets) > 0 || o.History != 0 || o.Replicas > 1 || o.Shards > 1 || o.Databases > 0:
		return fmt.Errorf("--capture cursor drains layout mark's table alone: not with --preset, --history, --replicas, --shards or --databases")
	case slices.ContainsFunc(o.Layouts, func(l string) bool { return l != "mark" && l != "delete" }):
		return fmt.Errorf("--capture cursor drains layout mark's table (its ceiling is claim+UPDATE), not %v", o.Layouts)
	}
	o.Layouts = []string{"mark"}
	return nil
}

// cursorCeiling is the ceiling of a drain by capture cursor: the claim and
// UPDATE statements of layout mark (a relay of its own on the same table,
// polling) in a loop.
func cursorCeiling(ctx context.Context, dbs pgDBs, tg *target, o Options, t table, ordering bool) (Measure, error) {
	po := o
	po.Capture, po.relaySuffix = config.CapturePoll, "_poll"
	a, stmts, cleanup, err := openRelay(ctx, dbs, tg, po, t, ordering)
	if err != nil {
		return Measure{}, err
	}
	defer cleanup()
	return ceilingOf(ctx, dbs, a, stmts, o, t)
}

// ceilingOf measures the ceiling loop of a's sources (on every database
// at once).
func ceilingOf(ctx context.Context, dbs pgDBs, a *app.App, stmts *stmtCounter, o Options, t table) (Measure, error) {
	srcs, err := a.Resolve(ctx)
	if err != nil {
		return Measure{}, err
	}
	return measure(ctx, dbs, t, nil, stmts, func() (int, error) { return ceilingAll(ctx, stores(srcs), o) })
}
