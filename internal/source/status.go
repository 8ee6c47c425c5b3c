package source

import (
	"database/sql"
	"encoding/json"
	"fmt"
	"time"
)

// Recorded is a source's state as the relays recorded it in the relay's
// own tables (relay_state, its lease, retry state and dead letters): what
// `outbox-relay status` reads, whichever replica relays the source.
type Recorded struct {
	Source        string
	Schema, Table string
	// Owner is the process holding the source's lease and Term its term;
	// Held is false once the lease has expired.
	Owner                string
	Term                 int64
	Held                 bool
	Pending              int64
	OldestPendingSeconds float64
	EventsPerSecond      float64
	// LastClaim is the latest successful claim by the relay's clock (nil:
	// none recorded); Updated is when the relay last recorded all this,
	// shifted to this process's clock.
	LastClaim, Updated *time.Time
	Sinks              map[string]string
	// Retrying counts events backing off; DeadLetters those dead-lettered
	// and not replayed.
	Retrying, DeadLetters int64
	// RecordedBy is the process that wrote the record (the holder's once
	// it has recorded); HeldSince is when the lease's holder took it,
	// shifted to this process's clock (nil: no lease).
	RecordedBy string
	HeldSince  *time.Time
	// Lease names the lease Owner, Term, Held and HeldSince are of: the
	// source's own, or one of its buckets' (Bucket.LeaseName); "" when
	// the source has no lease. A source has a record a lease.
	Lease string
}

// StatusSQL reads every source's recorded state in one database: rs is the
// quoted relay schema, now the database's clock in UTC and sinks the sink
// states as JSON text, in the dialect's SQL. A source has a row for its own
// lease and one for each lease of a bucket of it ("<source>/<n>"), or one
// row without a lease.
func StatusSQL(rs, now, sinks string) string {
	return `SELECT s.source, s.schema_name, s.table_name, COALESCE(l.owner, ''), COALESCE(l.term, 0),
  COALESCE(l.expires_at > ` + now + `, FALSE), s.pending_events, s.lag_seconds, s.events_per_second,
  s.last_claim_at, s.updated_at, ` + sinks + `,
  (SELECT COUNT(*) FROM ` + rs + `.retry_state r WHERE r.source = s.source),
  (SELECT COUNT(*) FROM ` + rs + `.failed_events f WHERE f.source = s.source AND f.replayed_at IS NULL),
  ` + now + `, COALESCE(s.owner, ''), l.acquired_at, COALESCE(l.shard, '')
FROM ` + rs + `.relay_state s LEFT JOIN ` + rs + `.leases l
  ON l.shard = s.source OR LEFT(l.shard, CHAR_LENGTH(s.source) + 1) = CONCAT(s.source, '/')
ORDER BY s.source, l.shard`
}

// RowScanner is what ScanStatus reads: database/sql's rows or pgx's.
type RowScanner interface {
	Next() bool
	Scan(dest ...any) error
	Err() error
}

// ScanStatus reads the rows of StatusSQL.
func ScanStatus(rows RowScanner) ([]Recorded, error) {
	var out []Recorded
	for rows.Next() {
		var (
			s                  Recorded
			sinks              string
			lastClaim, updated sql.NullTime
			acquired           sql.NullTime
			now                time.Time
		)
		if err := rows.Scan(&s.Source, &s.Schema, &s.Table, &s.Owner, &s.Term, &s.Held, &s.Pending, &s.OldestPendingSeconds,
			&s.EventsPerSecond, &lastClaim, &updated, &sinks, &s.Retrying, &s.DeadLetters, &now, &s.RecordedBy, &acquired, &s.Lease); err != nil {
			return nil, err
		}
		// The last claim is the relay's clock; the update time is the
		// database's, shifted to this process's clock so that ages compare
		// with time.Now.
		if lastClaim.Valid {
			t := lastClaim.Time
			s.LastClaim = &t
		}
		if updated.Valid {
			t := updated.Time.Add(time.Since(now))
			s.Updated = &t
		}
		if acquired.Valid {
			t := acquired.Time.Add(time.Since(now))
			s.HeldSince = &t
		}
		if err := json.Unmarshal([]byte(sinks), &s.Sinks); err != nil {
			return nil, fmt.Errorf("sink states of %s: %w", s.Source, err)
		}
		out = append(out, s)
	}
	return out, rows.Err()
}

// Replica is a relay process registered in a database (its replicas
// table) with a live heartbeat, and how many leases it holds there.
type Replica struct {
	Owner string
	Since time.Time // when it registered, by the database's clock
	Holds int
}

// ReplicasSQL lists the replicas of one database whose heartbeat is live:
// rs is the quoted relay schema, now the database's clock, in the
// dialect's SQL.
func ReplicasSQL(rs, now string) string {
	return `SELECT r.owner, r.started_at,
  (SELECT COUNT(*) FROM ` + rs + `.leases l WHERE l.owner = r.owner AND l.expires_at > ` + now + `)
FROM ` + rs + `.replicas r WHERE r.expires_at > ` + now + `
ORDER BY r.started_at, r.owner`
}

// ScanReplicas reads the rows of ReplicasSQL.
func ScanReplicas(rows RowScanner) ([]Replica, error) {
	var out []Replica
	for rows.Next() {
		var r Replica
		if err := rows.Scan(&r.Owner, &r.Since, &r.Holds); err != nil {
			return nil, err
		}
		out = append(out, r)
	}
	return out, rows.Err()
}
