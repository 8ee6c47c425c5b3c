package config

import "github.com/outbox-relay/outbox-relay/internal/layout"

// CaptureWAL is sources[].capture's logical replication mode.
const CaptureWAL = "wal"

// captureModes are the values of sources[].capture.
var captureModes = []string{CapturePoll, CaptureCursor, CaptureWAL}

// Cursor says whether the source is read by capture cursor.
func (s *Source) Cursor() bool { return s.Capture == CaptureCursor }

// WAL says whether the source is read from PostgreSQL's write-ahead log.
func (s *Source) WAL() bool { return s.Capture == CaptureWAL }

// captureLimits say, for each mode but poll, why it refuses what it
// refuses: a cursor reads PostgreSQL's transaction snapshots through the
// layout's xid column, keeps one position per source and never writes to
// the table; wal streams one replication slot per source, in commit order.
var captureLimits = map[string]struct{ reads, from, one, order, exactly string }{
	CaptureCursor: {
		reads:   "it reads transaction snapshots",
		from:    "cursor reads append-only tables",
		one:     "one position per source, read by one worker",
		order:   "its claims follow the order in which transactions committed",
		exactly: "a takeover records the events Kafka holds in the table's pending set, which a cursor keeps as a position",
	},
	CaptureWAL: {
		reads:   "it reads logical replication",
		from:    "wal reads inserts",
		one:     "one replication slot per source, streamed by one worker",
		order:   "rows come in the order their transactions committed",
		exactly: "a takeover marks the events Kafka holds in the table, behind the slot's position",
	},
}

// validateCapture checks sources[i].capture (p is sources[i]).
func (c *Config) validateCapture(ps *problems, p string, s *Source) {
	oneOf(ps, p+".capture", s.Capture, captureModes, true)
	lim, ok := captureLimits[s.Capture]
	if !ok {
		return
	}
	mode := s.Capture
	if db, ok := c.Databases[s.Database]; ok && db.Driver == "mysql" {
		ps.add(p+".capture", "%s needs PostgreSQL (%s); database %s is mysql", mode, lim.reads, s.Database)
	}
	if s.IsQueue() {
		ps.add(p+".capture", "%s; a queue (state mode queue) is claimed by deleting its rows", lim.from)
	}
	if s.Shards > 1 {
		ps.add(p+".shards", "not with capture %s: %s; got %d", mode, lim.one, s.Shards)
	}
	if s.EventPriority != nil {
		ps.add(p+".event_priority", "not with capture %s: %s", mode, lim.order)
	}
	if s.Delivery == DeliveryExactlyOnce {
		ps.add(p+".delivery", "exactly_once is not available with capture %s (%s)", mode, lim.exactly)
	}
	if !s.Cursor() {
		return
	}
	if s.Layout.XIDColumn == "" && layout.Presets[s.Preset].XIDColumn == "" {
		ps.add(p+".layout.xid_column", "required with capture cursor: an xid8 column filled by DEFAULT pg_current_xact_id(), "+
			"by which the relay tells the transactions committed since its position")
	}
	if s.Retention != nil {
		ps.add(p+".retention", "not with capture cursor: the relay never writes to the table, which is the application's history")
	}
}
