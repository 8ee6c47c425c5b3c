package postgres

import (
	"context"
	"time"

	"github.com/jackc/pgx/v5"

	"github.com/outbox-relay/outbox-relay/internal/layout"
	"github.com/outbox-relay/outbox-relay/internal/source"
)

// relaySQL are the statements of a completion's writes to the relay's own
// tables, which every store of an outbox table makes alike.
type relaySQL struct {
	retryState string // $1 source, $2 ids, $3 order keys, $4 attempts, $5 next, $6 errors, $7 ties
	clearRetry string // $1 source, $2 ids
	insertDead string // see relayWrites.dead
}

func newRelaySQL(l *layout.Layout, table, rs string) relaySQL {
	return relaySQL{retryState: retryStateSQL(rs), clearRetry: clearRetrySQL(rs), insertDead: insertDeadSQL(l, table, rs)}
}

// relayWrites queues the statements of a batch's completion that write the
// relay's own tables: the lease check first (under a lease), the retry
// state of rows to try again, the dead letters, the retry state of rows
// settled. As a source.CompletionWriter it records nothing for delivered
// rows: a store that writes nothing to its table (capture cursor) records
// them otherwise, and the polling store extends it with the table's writes.
type relayWrites struct {
	relaySQL
	q           pgx.Batch
	relaySchema string
	lease       *source.Lease // the lease the batch was claimed under, or nil
	source      string
	table       Table
	rows        []source.Row // the batch's rows, and their places in their transactions
	ties        []int64
}

// CheckLease queues the lease check ahead of the writes; the completion
// reads its answer first.
func (w *relayWrites) CheckLease(context.Context) error {
	queueLeaseCheck(&w.q, w.relaySchema, w.lease)
	return nil
}

func (w *relayWrites) Acknowledge(context.Context, []int) error { return nil }

func (w *relayWrites) RecordRetries(_ context.Context, rs []source.Retry) error {
	n := len(rs)
	ids, keys, errs := make([]string, n), make([]string, n), make([]string, n)
	attempts, at, ties := make([]int32, n), make([]time.Time, n), make([]int64, n)
	for i, r := range rs {
		row := &w.rows[r.Index]
		ids[i], keys[i], attempts[i], at[i], errs[i] = row.ID, row.OrderKey, int32(r.Attempts), r.At, r.Err
		ties[i] = w.ties[r.Index]
	}
	w.q.Queue(w.retryState, w.source, ids, keys, attempts, at, errs, ties)
	return nil
}

func (w *relayWrites) DeadLetter(_ context.Context, ds []source.DeadLetter) error {
	w.dead(ds)
	return nil
}

// dead queues the dead letters and returns their ids, reasons and
// attempts, for a store that marks them in its table too.
func (w *relayWrites) dead(ds []source.DeadLetter) (ids, reasons []string, attempts []int32) {
	n := len(ds)
	ids, types, topics, keys, pkeys, headers := make([]string, n), make([]*string, n), make([]*string, n), make([]*string, n), make([]*string, n), make([]*string, n)
	payloads, isJSON := make([][]byte, n), make([]bool, n)
	reasons, attempts = make([]string, n), make([]int32, n)
	for i, d := range ds {
		ids[i], payloads[i], isJSON[i], reasons[i], attempts[i] = d.ID, d.Payload, d.PayloadIsJSON, d.Reason, int32(d.Attempts)
		types[i], topics[i], keys[i], pkeys[i], headers[i] = &d.EventType, d.Topic, d.Key, d.PartitionKey, d.Headers
	}
	w.q.Queue(w.insertDead, w.source, w.table.Schema, w.table.Name,
		ids, types, topics, keys, pkeys, headers, payloads, isJSON, reasons, attempts)
	return ids, reasons, attempts
}

func (w *relayWrites) ForgetRetries(_ context.Context, ids []string) error {
	w.q.Queue(w.clearRetry, w.source, ids)
	return nil
}

// retriesInTable queues the retry state of rs and, where the table keeps
// them (retryRow, see statements), the rows' own retry columns.
func (w *relayWrites) retriesInTable(retryRow string, rs []source.Retry) {
	_ = w.RecordRetries(context.Background(), rs)
	if retryRow != "" {
		ids, attempts, errs := make([]string, len(rs)), make([]int32, len(rs)), make([]string, len(rs))
		for i, r := range rs {
			ids[i], attempts[i], errs[i] = w.rows[r.Index].ID, int32(r.Attempts), r.Err
		}
		w.q.Queue(retryRow, ids, attempts, errs)
	}
}

// deadInTable queues the dead letters and their state in the table (dead,
// see statements): deleted where the layout deletes.
func (w *relayWrites) deadInTable(dead string, deletes bool, ds []source.DeadLetter) {
	ids, reasons, attempts := w.dead(ds)
	if deletes {
		w.q.Queue(dead, ids)
	} else {
		w.q.Queue(dead, ids, reasons, attempts)
	}
}
