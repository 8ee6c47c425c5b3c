package config

// CaptureWAL is sources[].capture's logical replication mode.
const CaptureWAL = "wal"

// WAL says whether the source is read from PostgreSQL's write-ahead log.
func (s *Source) WAL() bool { return s.Capture == CaptureWAL }

// validateWAL checks a source read by capture wal (p is sources[i]): one
// replication slot per source, streamed by one holder in commit order.
func (c *Config) validateWAL(ps *problems, p string, s *Source) {
	if !s.WAL() {
		return
	}
	if db, ok := c.Databases[s.Database]; ok && db.Driver == "mysql" {
		ps.add(p+".capture", "wal needs PostgreSQL (it reads logical replication); database %s is mysql", s.Database)
	}
	if s.IsQueue() {
		ps.add(p+".capture", "wal reads inserts; a queue (state mode queue) is claimed by deleting its rows")
	}
	if s.Shards > 1 {
		ps.add(p+".shards", "not with capture wal: one replication slot per source, streamed by one worker; got %d", s.Shards)
	}
	if s.EventPriority != nil {
		ps.add(p+".event_priority", "not with capture wal: rows come in the order their transactions committed")
	}
	if s.Delivery == DeliveryExactlyOnce {
		ps.add(p+".delivery", "exactly_once is not available with capture wal (a takeover marks the events Kafka holds in the table, behind the slot's position)")
	}
}
