package app

import (
	"context"
	"database/sql"
	"encoding/json"
	"fmt"
	"slices"
	"strings"
	"time"

	"github.com/outbox-relay/outbox-relay/internal/config"
	"github.com/outbox-relay/outbox-relay/internal/source/mysql"
	"github.com/outbox-relay/outbox-relay/internal/source/postgres"
)

// SourceStatus is what `outbox-relay status` reports of one source, read
// from the relay's own tables (so any process with the configuration can
// ask, whichever replica relays the source).
type SourceStatus struct {
	Source   string `json:"source"`
	Database string `json:"database"`
	Table    string `json:"table"`
	// Owner is the process holding the source's lease and Term its term;
	// Held is false once the lease has expired.
	Owner string `json:"owner"`
	Term  int64  `json:"term"`
	Held  bool   `json:"held"`
	// Pending and OldestPendingSeconds are the backlog as last recorded.
	Pending              int64   `json:"pending"`
	OldestPendingSeconds float64 `json:"oldest_pending_seconds"`
	// EventsPerSecond is the delivery rate over the last minute.
	EventsPerSecond float64 `json:"events_per_second"`
	// Retrying counts events backing off; DeadLetters those dead-lettered
	// and not replayed.
	Retrying    int64 `json:"retrying"`
	DeadLetters int64 `json:"dead_letters"`
	// LastClaim is the latest successful claim (nil: none recorded);
	// Updated when the relay last recorded all this.
	LastClaim *time.Time        `json:"last_claim,omitempty"`
	Updated   *time.Time        `json:"updated,omitempty"`
	Sinks     map[string]string `json:"sinks"`
	// Stuck says why the source is stuck; empty when it is not.
	Stuck string `json:"stuck,omitempty"`
}

// statusSQL reads every source's recorded state in one database; rs is the
// quoted relay schema, now the database's clock in UTC.
func statusSQL(rs, now, sinks string) string {
	return `SELECT s.source, s.schema_name, s.table_name, COALESCE(l.owner, ''), COALESCE(l.term, 0),
  COALESCE(l.expires_at > ` + now + `, FALSE), s.pending_events, s.lag_seconds, s.events_per_second,
  s.last_claim_at, s.updated_at, ` + sinks + `,
  (SELECT COUNT(*) FROM ` + rs + `.retry_state r WHERE r.source = s.source),
  (SELECT COUNT(*) FROM ` + rs + `.failed_events f WHERE f.source = s.source AND f.replayed_at IS NULL),
  ` + now + `
FROM ` + rs + `.relay_state s LEFT JOIN ` + rs + `.leases l ON l.shard = s.source
ORDER BY s.source`
}

// Status reads the state of every source of the configuration, as the
// relays recorded it, and judges whether each is stuck.
func (a *App) Status(ctx context.Context) ([]SourceStatus, error) {
	var out []SourceStatus
	for _, db := range slices.Sorted(func(yield func(string) bool) {
		for n := range a.cfg.Databases {
			if !yield(n) {
				return
			}
		}
	}) {
		var got []SourceStatus
		if my, ok := a.mysqlDBs[db]; ok {
			rs := mysql.QuoteIdent(a.cfg.RelaySchema)
			rows, err := my.QueryContext(ctx, statusSQL(rs, "UTC_TIMESTAMP(6)", "COALESCE(s.sink_states, '{}')"))
			if err == nil {
				got, err = scanStatus(rows, db)
				_ = rows.Close()
			}
			if err != nil {
				return nil, fmt.Errorf("databases.%s: read status: %w", db, err)
			}
		} else {
			rs := postgres.QuoteIdent(a.cfg.RelaySchema)
			rows, err := a.pools[db].Query(ctx, statusSQL(rs, "now()", "s.sink_states::text"))
			if err == nil {
				got, err = scanStatus(rows, db)
				rows.Close()
			}
			if err != nil {
				return nil, fmt.Errorf("databases.%s: read status: %w", db, err)
			}
		}
		out = append(out, got...)
	}
	return a.judge(out), nil
}

// rowScanner is what scanStatus reads: database/sql's rows or pgx's.
type rowScanner interface {
	Next() bool
	Scan(dest ...any) error
	Err() error
}

func scanStatus(rows rowScanner, db string) ([]SourceStatus, error) {
	var out []SourceStatus
	for rows.Next() {
		s := SourceStatus{Database: db}
		var (
			schema, table, sinks string
			lastClaim, updated   sql.NullTime
			now                  time.Time
		)
		if err := rows.Scan(&s.Source, &schema, &table, &s.Owner, &s.Term, &s.Held, &s.Pending, &s.OldestPendingSeconds,
			&s.EventsPerSecond, &lastClaim, &updated, &sinks, &s.Retrying, &s.DeadLetters, &now); err != nil {
			return nil, err
		}
		s.Table = table
		if schema != "" {
			s.Table = schema + "." + table
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
		if err := json.Unmarshal([]byte(sinks), &s.Sinks); err != nil {
			return nil, fmt.Errorf("sink states of %s: %w", s.Source, err)
		}
		out = append(out, s)
	}
	return out, rows.Err()
}

// judge keeps the sources of this configuration (a discovered source is
// "rule:schema.table"), adds those no relay has recorded yet, and says
// which are stuck.
func (a *App) judge(recorded []SourceStatus) []SourceStatus {
	var out []SourceStatus
	now := time.Now()
	for _, cs := range a.cfg.Sources {
		found := false
		for _, s := range recorded {
			if s.Source != cs.Name && !strings.HasPrefix(s.Source, cs.Name+":") {
				continue
			}
			found = true
			s.Stuck = stuck(s, cs, now)
			out = append(out, s)
		}
		if !found {
			out = append(out, SourceStatus{Source: cs.Name, Database: cs.Database, Table: cs.Table,
				Sinks: map[string]string{}, Stuck: "no relay has recorded it yet"})
		}
	}
	return out
}

// stuck says why a source is stuck, or "".
func stuck(s SourceStatus, cs config.Source, now time.Time) string {
	// The relay records every stats interval (15 s): allow for it.
	const slack = 30 * time.Second
	switch {
	case !s.Held:
		return "no relay holds it (no live lease)"
	case s.LastClaim == nil:
		return "no successful claim recorded"
	case now.Sub(*s.LastClaim) > cs.Readiness.MaxClaimFailure.D()+slack:
		return fmt.Sprintf("no successful claim for %s", now.Sub(*s.LastClaim).Round(time.Second))
	case time.Duration(s.OldestPendingSeconds*float64(time.Second)) > cs.Readiness.MaxOldestPending.D():
		return fmt.Sprintf("the oldest pending event is %s old (readiness.max_oldest_pending %s)",
			time.Duration(s.OldestPendingSeconds*float64(time.Second)).Round(time.Second), cs.Readiness.MaxOldestPending)
	}
	for name, st := range s.Sinks {
		if st == "circuit open" {
			return "sink " + name + ": circuit open"
		}
	}
	return ""
}
