package postgres

import (
	"context"
	"errors"

	"github.com/outbox-relay/outbox-relay/internal/source/driver"
)

// openWAL opens the store of a source read by capture wal (see WALStore).
func (t *adaptedTable) openWAL(_ context.Context, p driver.SourceParams) (*WALStore, error) {
	switch {
	case p.Bucket.Split():
		return nil, errors.New("shards: capture wal streams one replication slot per source; it is not split")
	case p.Layout.Queue != nil:
		return nil, errors.New("capture: wal reads inserts; a queue (state mode queue) is claimed by deleting its rows")
	case p.Priority != nil:
		return nil, errors.New("event_priority: not with capture wal: rows come in the order their transactions committed")
	}
	conn := t.db.pool.Config().ConnConfig.Config.Copy()
	return NewWAL(t.db.pool, WALOptions{Source: p.Source, Table: t.t, RelaySchema: t.db.schema,
		Layout: p.Layout, Ordering: p.Ordering, Conn: conn, Logger: p.Logger}), nil
}
