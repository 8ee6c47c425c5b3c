package mysql

import (
	"context"
	"fmt"
	"strings"

	"github.com/outbox-relay/outbox-relay/internal/source"
)

// DeadLetter implements source.CompletionWriter: it copies dead rows to
// failed_events (their route as rendered, the payload as JSON or raw bytes,
// the whole row as JSON) and takes them out of the pending set.
func (b *batch) DeadLetter(ctx context.Context, ds []source.DeadLetter) error {
	s := b.store
	cols, err := s.tableColumns(ctx)
	if err != nil {
		return fmt.Errorf("dead letters: %w", err)
	}
	rs := QuoteIdent(s.opts.RelayDatabase)
	schema := s.opts.Table.Schema
	schemaExpr := "?"
	if schema == "" {
		schemaExpr = "COALESCE(DATABASE(), '')"
	}
	var (
		union []string
		uargs []any
		ids   = make([]string, len(ds))
	)
	for i, d := range ds {
		ids[i] = d.ID
		if i == 0 {
			union = append(union, "SELECT ? AS id, ? AS event_type, ? AS topic, ? AS event_key, ? AS partition_key, ? AS headers, "+
				"? AS payload, ? AS is_json, ? AS reason, ? AS attempts")
		} else {
			union = append(union, "SELECT ?, ?, ?, ?, ?, ?, ?, ?, ?, ?")
		}
		uargs = append(uargs, d.ID, d.EventType, d.Topic, d.Key, d.PartitionKey, d.Headers, d.Payload, d.PayloadIsJSON, d.Reason, d.Attempts)
	}
	// A payload is kept as JSON only when the server agrees it is JSON;
	// anything else goes to payload_raw as it was.
	jsonPayload := "(u.is_json AND COALESCE(JSON_VALID(CONVERT(u.payload USING utf8mb4)), FALSE))"
	q := `INSERT INTO ` + rs + `.failed_events (original_event_id, source, source_schema, source_table,
  event_type, topic, event_key, partition_key, headers, payload, payload_raw, row_data,
  failure_reason, failure_count, first_failed_at, last_failed_at, created_at)
SELECT u.id, ?, ` + schemaExpr + `, ?, COALESCE(u.event_type, ''), u.topic, u.event_key, u.partition_key,
  CASE WHEN COALESCE(JSON_VALID(u.headers), FALSE) THEN u.headers END,
  CASE WHEN ` + jsonPayload + ` THEN CONVERT(u.payload USING utf8mb4) END,
  CASE WHEN NOT ` + jsonPayload + ` THEN u.payload END,
  ` + rowJSON(cols, "o") + `, u.reason, u.attempts, COALESCE(r.first_failed_at, ` + now + `), ` + now + `, ` + now + `
FROM (` + strings.Join(union, "\n  UNION ALL ") + `) u
JOIN ` + s.opts.Table.String() + ` o ON ` + sq.Col("o", s.opts.Layout.ID.Name) + ` = ` + idValueSQL(s.opts.Layout, "u.id") + `
LEFT JOIN ` + rs + `.retry_state r ON r.source = ? AND r.event_id = u.id` + binCollation
	args := []any{s.opts.Source}
	if schema != "" {
		args = append(args, schema)
	}
	args = append(args, s.opts.Table.Name)
	args = append(args, uargs...)
	args = append(args, s.opts.Source)
	if _, err := b.tx.ExecContext(ctx, q, args...); err != nil {
		return fmt.Errorf("insert dead letters: %w", err)
	}
	if s.opts.Layout.Mode == "delete" {
		return b.byIDs(ctx, "delete dead rows", "", ids)
	}
	attempts := make([]any, len(ds))
	reasons := make([]any, len(ds))
	for i, d := range ds {
		msg, err := s.fitError(ctx, d.Reason)
		if err != nil {
			return fmt.Errorf("mark dead rows: %w", err)
		}
		attempts[i], reasons[i] = d.Attempts, msg
	}
	return b.updateRows(ctx, "mark dead rows", s.sql.deadSets, ids, attempts, reasons)
}
