package config

import "github.com/outbox-relay/outbox-relay/internal/layout"

// captureModes are the values of sources[].capture.
var captureModes = []string{CapturePoll, CaptureCursor, CaptureWAL}

// Cursor says whether the source is read by capture cursor.
func (s *Source) Cursor() bool { return s.Capture == CaptureCursor }

// validateCapture checks sources[i].capture (p is sources[i]): a cursor
// reads PostgreSQL's transaction snapshots through the layout's xid
// column, keeps one position per source, and never writes to the table.
func (c *Config) validateCapture(ps *problems, p string, s *Source) {
	oneOf(ps, p+".capture", s.Capture, captureModes, true)
	c.validateWAL(ps, p, s)
	if !s.Cursor() {
		return
	}
	if db, ok := c.Databases[s.Database]; ok && db.Driver == "mysql" {
		ps.add(p+".capture", "cursor needs PostgreSQL (it reads transaction snapshots); database %s is mysql", s.Database)
	}
	if s.IsQueue() {
		ps.add(p+".capture", "cursor reads append-only tables; a queue (state mode queue) is claimed by deleting its rows")
	}
	if s.Layout.XIDColumn == "" && layout.Presets[s.Preset].XIDColumn == "" {
		ps.add(p+".layout.xid_column", "required with capture cursor: an xid8 column filled by DEFAULT pg_current_xact_id(), "+
			"by which the relay tells the transactions committed since its position")
	}
	if s.Shards > 1 {
		ps.add(p+".shards", "not with capture cursor: one position per source, read by one worker; got %d", s.Shards)
	}
	if s.Retention != nil {
		ps.add(p+".retention", "not with capture cursor: the relay never writes to the table, which is the application's history")
	}
	if s.EventPriority != nil {
		ps.add(p+".event_priority", "not with capture cursor: its claims follow the order in which transactions committed")
	}
	if s.Delivery == DeliveryExactlyOnce {
		ps.add(p+".delivery", "exactly_once is not available with capture cursor (a takeover records the events Kafka holds in the table's pending set, which a cursor keeps as a position)")
	}
}
