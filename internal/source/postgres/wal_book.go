package postgres

import (
	"slices"
	"time"

	"github.com/jackc/pglogrepl"

	"github.com/outbox-relay/outbox-relay/internal/source"
)

// walTx is a transaction the stream released (or the rows the slot's
// snapshot found pending): the slot may confirm end once every row of it is
// settled.
type walTx struct {
	end pglogrepl.LSN
	// left counts the rows not yet settled, and one more while rows are
	// still being added (the snapshot's, read in pages).
	left int
	// mark is set on the snapshot's rows: once they are settled, the
	// publication's comment must say so before the slot moves past them
	// (see walBacklogDone).
	mark bool
}

// rowState is where a row of the stream stands.
type rowState uint8

const (
	rowQueued    rowState = iota // waiting for a claim
	rowInFlight                  // in a batch
	rowRetry                     // backing off until due; its key is held
	rowPublished                 // delivered; its table write not yet committed
	rowWriting                   // its table write in progress
	rowDone                      // settled: delivered and written, or dead-lettered
)

// walRow is a row of the stream and where it stands.
type walRow struct {
	row   source.Row
	tx    *walTx
	tie   int64 // its place among its transaction's rows
	state rowState
	due   time.Time // when rowRetry
	// retrying says the row has retry state, forgotten with its table
	// write.
	retrying bool
}

// walBook holds the rows of the stream not yet settled, in stream order
// (transactions in commit order, each one's rows in the order they were
// written), and the transactions the slot has not confirmed. It is the one
// owner of what a claim of capture wal may take (claim) and of how far the
// slot may confirm (advance). It is not safe for concurrent use: its
// store's run guards it.
type walBook struct {
	ordering bool
	rows     []*walRow
	// done counts the settled rows still in rows (behind one that is not).
	done int
	txs  []*walTx
	// written are the delivered rows whose table write is due.
	written []*walRow
}

// add appends the rows of tx (released by its commit) after those already
// held.
func (b *walBook) add(tx *walTx, rows []*walRow) {
	for _, r := range rows {
		r.tx = tx
	}
	b.rows = append(b.rows, rows...)
}

// open registers tx, whose rows follow, among the transactions the slot
// waits for.
func (b *walBook) open(tx *walTx) { b.txs = append(b.txs, tx) }

// held is how many rows the book holds not yet settled.
func (b *walBook) held() int { return len(b.rows) - b.done }

// claim takes up to limit rows in stream order: queued rows, and retried
// rows whose retry is due. Rows in flight, delivered or settled are passed
// over. With ordering, a row that backs off holds its key: the key's later
// rows wait until it is due (rows without a key hold nothing), the rule the
// poll claim applies in SQL.
func (b *walBook) claim(limit int, now time.Time) []*walRow {
	var (
		out  []*walRow
		held map[string]bool
	)
	for _, r := range b.rows {
		if len(out) == limit {
			break
		}
		key := r.row.OrderKey
		keyed := b.ordering && key != ""
		if keyed && held[key] {
			continue
		}
		switch r.state {
		case rowRetry:
			if now.Before(r.due) {
				if keyed {
					if held == nil {
						held = map[string]bool{}
					}
					held[key] = true
				}
				continue
			}
		case rowQueued:
		default:
			continue
		}
		r.state = rowInFlight
		out = append(out, r)
	}
	return out
}

// requeue gives rows back to the claims untouched.
func (b *walBook) requeue(rows []*walRow) {
	for _, r := range rows {
		if r.state == rowInFlight {
			r.state = rowQueued
		}
	}
}

// backOff makes a row wait until at, its key held until then.
func (b *walBook) backOff(r *walRow, attempts int, at time.Time) {
	r.state, r.due, r.retrying = rowRetry, at, true
	r.row.Attempts = attempts
}

// published records a delivered row: settled once its table write
// commits (see wrote).
func (b *walBook) published(r *walRow) {
	r.state = rowPublished
	b.written = append(b.written, r)
}

// toWrite takes the delivered rows whose table write is due.
func (b *walBook) toWrite() []*walRow {
	out := b.written
	b.written = nil
	for _, r := range out {
		r.state = rowWriting
	}
	return out
}

// unwritten puts back rows whose table write failed.
func (b *walBook) unwritten(rows []*walRow) {
	for _, r := range rows {
		r.state = rowPublished
	}
	b.written = append(rows, b.written...)
}

// settle records rows settled: written, or dead-lettered.
func (b *walBook) settle(rows []*walRow) {
	for _, r := range rows {
		r.state = rowDone
		r.tx.left--
	}
	b.done += len(rows)
	n := 0
	for n < len(b.rows) && b.rows[n].state == rowDone {
		n++
	}
	if n > 0 {
		clear(b.rows[:n])
		b.rows = b.rows[n:]
		b.done -= n
	}
	if b.done > 1024 && 2*b.done > len(b.rows) {
		// Settled rows behind one that backs off: their transactions wait
		// for it, they need not.
		b.rows = slices.DeleteFunc(b.rows, func(r *walRow) bool { return r.state == rowDone })
		b.done = 0
	}
}

// advance passes the transactions settled at the head of the commit
// order: it returns the end of the last one passed (zero: none) and, when
// it stopped at the snapshot's settled rows whose comment is not written,
// those (see walTx.mark).
func (b *walBook) advance() (pglogrepl.LSN, *walTx) {
	var end pglogrepl.LSN
	for len(b.txs) > 0 && b.txs[0].left == 0 {
		if b.txs[0].mark {
			return end, b.txs[0]
		}
		end = b.txs[0].end
		b.txs[0] = nil
		b.txs = b.txs[1:]
	}
	return end, nil
}

// idle says whether nothing the stream released is still unsettled.
func (b *walBook) idle() bool { return len(b.txs) == 0 }
