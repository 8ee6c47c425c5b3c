package postgres

import (
	"context"

	"github.com/outbox-relay/outbox-relay/internal/source"
)

// Replay implements driver.Replayer: a dead letter's row comes back through
// the stream as an insert. The row, if still there (marked failed), is
// deleted and inserted again from the copy its dead letter kept, in one
// transaction; its retry state is forgotten and the dead letter marked
// replayed and audited. An UPDATE back to pending, as polling replays,
// would never reach the publication, which carries inserts alone.
func (s *WALStore) Replay(ctx context.Context, events []FailedEvent, actor string) (int, error) {
	o := s.opts
	st := buildReplaySQL(o.Layout, o.Table, o.RelaySchema, o.Source, "")
	st.Reset = "DELETE FROM " + o.Table.String() + " o WHERE " + sq.Col("o", o.Layout.ID.Name) + " = $1::text::" + o.Layout.ID.Type
	// Whether the row was there or not, it is inserted again.
	st.Present = "SELECT 0::bigint WHERE $1::text IS NOT NULL"
	st.Wake = "" // the stream brings it
	return source.Replay(ctx, poolDriver{s.pool}, st, events, actor)
}
