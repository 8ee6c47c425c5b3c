// Package ledger checks what a relay delivered against what producers
// committed: events lost, delivered without having been committed,
// delivered more than once, and delivered out of order within their key
// (judged on each event's first delivery).
package ledger

import (
	"fmt"
	"slices"
	"sync"
)

// Ledger records commits and deliveries; safe for concurrent use.
type Ledger struct {
	mu        sync.Mutex
	committed map[string]entry // event id -> its key and place in the key
	perKey    map[string]int   // events committed per key so far
	delivered []string         // event ids in arrival order
}

type entry struct {
	key string
	seq int
}

// New returns an empty ledger.
func New() *Ledger {
	return &Ledger{committed: map[string]entry{}, perKey: map[string]int{}}
}

// Commit records that the event id of key was committed, after every event
// of key committed before it. Events of key "" (keyless) have no order.
func (l *Ledger) Commit(id, key string) {
	l.mu.Lock()
	defer l.mu.Unlock()
	l.perKey[key]++
	l.committed[id] = entry{key: key, seq: l.perKey[key]}
}

// Deliver records that the event id arrived (after every delivery recorded
// before it).
func (l *Ledger) Deliver(id string) {
	l.mu.Lock()
	defer l.mu.Unlock()
	l.delivered = append(l.delivered, id)
}

// Report is what Check found.
type Report struct {
	Committed, Delivered int
	Lost                 []string // committed, never delivered
	Unexpected           []string // delivered, never committed
	Duplicates           int      // deliveries after an event's first
	OutOfOrder           []string // "key: #3 before #2" on first delivery
}

// OK reports whether nothing was lost, unexpected or out of order;
// duplicates are counted, not judged (at least once allows them).
func (r Report) OK() bool {
	return len(r.Lost) == 0 && len(r.Unexpected) == 0 && len(r.OutOfOrder) == 0
}

func (r Report) String() string {
	return fmt.Sprintf("%d committed, %d delivered: %d lost, %d unexpected, %d duplicates, %d out of order%s",
		r.Committed, r.Delivered, len(r.Lost), len(r.Unexpected), r.Duplicates, len(r.OutOfOrder), examples(r))
}

func examples(r Report) string {
	var ex []string
	for _, list := range [][]string{r.Lost, r.Unexpected, r.OutOfOrder} {
		if len(list) > 0 {
			ex = append(ex, list[:min(3, len(list))]...)
		}
	}
	if len(ex) == 0 {
		return ""
	}
	return fmt.Sprintf(" (e.g. %v)", ex)
}

// Check compares the deliveries with the commits. except, when not nil,
// leaves out events that are not meant to be delivered (dead letters); they
// count neither as lost nor as unexpected, and hold nothing in order.
func (l *Ledger) Check(except func(id string) bool) Report {
	l.mu.Lock()
	defer l.mu.Unlock()
	skip := func(id string) bool { return except != nil && except(id) }
	r := Report{Delivered: len(l.delivered)}
	seen := map[string]bool{}
	last := map[string]int{} // per key, the latest place delivered first
	for _, id := range l.delivered {
		e, ok := l.committed[id]
		switch {
		case seen[id]:
			r.Duplicates++
			continue
		case !ok:
			r.Unexpected = append(r.Unexpected, id)
		case !skip(id) && e.key != "": // keyless events have no order
			if e.seq < last[e.key] {
				r.OutOfOrder = append(r.OutOfOrder, fmt.Sprintf("%s: #%d after #%d", e.key, e.seq, last[e.key]))
			}
			last[e.key] = max(last[e.key], e.seq)
		}
		seen[id] = true
	}
	for id := range l.committed {
		if skip(id) {
			continue
		}
		r.Committed++
		if !seen[id] {
			r.Lost = append(r.Lost, id)
		}
	}
	slices.Sort(r.Lost)
	return r
}
