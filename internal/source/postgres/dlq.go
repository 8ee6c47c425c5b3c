package postgres

import (
	"context"
	"errors"
	"fmt"
	"strings"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgxpool"

	"github.com/outbox-relay/outbox-relay/internal/source"
)

// FailedEvent is one row of the dead-letter table.
type FailedEvent = source.FailedEvent

// DLQFilter selects dead letters.
type DLQFilter = source.DLQFilter

// ListFailed returns dead letters matching f, oldest first (with f.Newest,
// the newest failure first).
func ListFailed(ctx context.Context, pool *pgxpool.Pool, relaySchema string, f DLQFilter) ([]FailedEvent, error) {
	var (
		where []string
		args  []any
	)
	arg := func(v any) string {
		args = append(args, v)
		return fmt.Sprintf("$%d", len(args))
	}
	if len(f.IDs) > 0 {
		where = append(where, "id::text = ANY("+arg(f.IDs)+"::text[])")
	}
	if len(f.EventIDs) > 0 {
		where = append(where, "original_event_id = ANY("+arg(f.EventIDs)+"::text[])")
	}
	if f.Source != "" {
		where = append(where, "source = "+arg(f.Source))
	}
	if f.EventType != "" {
		where = append(where, "event_type = "+arg(f.EventType))
	}
	if !f.Since.IsZero() {
		where = append(where, "first_failed_at >= "+arg(f.Since))
	}
	if f.Reason != "" {
		where = append(where, "strpos(lower(failure_reason), lower("+arg(f.Reason)+")) > 0")
	}
	if !f.IncludeReplayed {
		where = append(where, "replayed_at IS NULL")
	}
	q := `SELECT id::text, original_event_id, source, source_schema, source_table, event_type, COALESCE(topic, ''),
  failure_reason, failure_count, first_failed_at, last_failed_at, replayed_at, replay_count,
  COALESCE(convert_to(payload::text, 'UTF8'), payload_raw)
FROM ` + QuoteIdent(relaySchema) + `.failed_events`
	if len(where) > 0 {
		q += " WHERE " + strings.Join(where, " AND ")
	}
	if f.Newest {
		q += " ORDER BY last_failed_at DESC, id DESC"
	} else {
		q += " ORDER BY created_at, id"
	}
	if f.Limit > 0 {
		q += " LIMIT " + arg(f.Limit)
	}
	rows, err := pool.Query(ctx, q, args...)
	if err != nil {
		return nil, fmt.Errorf("list dead letters: %w", err)
	}
	out, err := pgx.CollectRows(rows, func(r pgx.CollectableRow) (FailedEvent, error) {
		var e FailedEvent
		err := r.Scan(&e.ID, &e.OriginalEventID, &e.Source, &e.SourceSchema, &e.SourceTable, &e.EventType, &e.Topic,
			&e.Reason, &e.FailureCount, &e.FirstFailedAt, &e.LastFailedAt, &e.ReplayedAt, &e.ReplayCount, &e.Payload)
		return e, err
	})
	if err != nil {
		return nil, fmt.Errorf("list dead letters: %w", err)
	}
	return out, nil
}

// Replay puts dead letters of this store's source back into the pending set:
// the row is updated back to pending (or, when the layout deleted it,
// inserted again from the copy kept in failed_events, which needs INSERT on
// the table), its retry state is cleared, the dead letter is marked replayed
// and an audit row records who did it. Each event is its own transaction.
func (s *Store) Replay(ctx context.Context, events []FailedEvent, actor string) (int, error) {
	rs := QuoteIdent(s.opts.RelaySchema)
	l := s.opts.Layout
	table := s.opts.Table.String()
	update := ""
	if s.sql.pendingValues != "" && l.Mode != "delete" {
		update = "UPDATE " + table + " o SET " + s.sql.pendingValues + " WHERE " + sq.Col("o", l.ID.Name) + " = $1::text::" + l.ID.Type
	}
	insert := "INSERT INTO " + table + " SELECT * FROM jsonb_populate_record(NULL::" + table + ", (SELECT row_data FROM " + rs + ".failed_events WHERE id = $1::uuid))"
	n := 0
	for _, e := range events {
		if e.Source != s.opts.Source {
			return n, fmt.Errorf("replay %s: dead letter belongs to source %q, not %q", e.ID, e.Source, s.opts.Source)
		}
		err := pgx.BeginFunc(ctx, s.pool, func(tx pgx.Tx) error {
			restored := false
			if update != "" {
				tag, err := tx.Exec(ctx, update, e.OriginalEventID)
				if err != nil {
					return fmt.Errorf("reset row: %w", err)
				}
				restored = tag.RowsAffected() > 0
			}
			if !restored {
				tag, err := tx.Exec(ctx, insert, e.ID)
				if err != nil {
					if isPrivilegeError(err) {
						return fmt.Errorf("restore deleted row (needs INSERT on %s): %w: %w", table, source.ErrNoPrivilege, err)
					}
					return fmt.Errorf("restore deleted row: %w", err)
				}
				if tag.RowsAffected() == 0 {
					return errors.New("restore deleted row: no copy of the row was kept")
				}
			}
			if _, err := tx.Exec(ctx, "DELETE FROM "+rs+".retry_state WHERE source = $1 AND event_id = $2", s.opts.Source, e.OriginalEventID); err != nil {
				return fmt.Errorf("clear retry state: %w", err)
			}
			if _, err := tx.Exec(ctx, "UPDATE "+rs+".failed_events SET replayed_at = now(), replay_count = replay_count + 1 WHERE id = $1::uuid", e.ID); err != nil {
				return fmt.Errorf("mark replayed: %w", err)
			}
			_, err := tx.Exec(ctx, "INSERT INTO "+rs+".failed_event_audit (failed_event_id, action, actor, detail) VALUES ($1::uuid, 'replay', $2, $3)",
				e.ID, actor, "event "+e.OriginalEventID+" back to pending in "+table)
			if err != nil {
				return fmt.Errorf("audit: %w", err)
			}
			// Wake the relay at once, as an insert does through the
			// wake-up trigger (an update fires none); delivered at commit.
			if _, err := tx.Exec(ctx, "SELECT pg_notify($1, $2)", s.opts.RelaySchema, s.opts.Table.Schema+"."+s.opts.Table.Name); err != nil {
				return fmt.Errorf("wake the relay: %w", err)
			}
			return nil
		})
		if err != nil {
			return n, fmt.Errorf("replay %s (event %s): %w", e.ID, e.OriginalEventID, err)
		}
		n++
	}
	return n, nil
}

// PurgeDead deletes the dead letters with ids that were not replayed, each with
// an audit row naming actor and the event; the rows in the application's
// table stay as they are. It returns how many it deleted.
func PurgeDead(ctx context.Context, pool *pgxpool.Pool, relaySchema string, ids []string, actor string) (int, error) {
	rs := QuoteIdent(relaySchema)
	tag, err := pool.Exec(ctx, `WITH d AS (DELETE FROM `+rs+`.failed_events WHERE id::text = ANY($1::text[]) AND replayed_at IS NULL
  RETURNING id, source, original_event_id)
INSERT INTO `+rs+`.failed_event_audit (failed_event_id, action, actor, detail)
SELECT id, 'purge', $2, 'event ' || original_event_id || ' of source ' || source || ' deleted from the dead letters' FROM d`, ids, actor)
	if err != nil {
		return 0, fmt.Errorf("purge dead letters: %w", err)
	}
	return int(tag.RowsAffected()), nil
}
