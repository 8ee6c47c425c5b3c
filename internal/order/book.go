package order

import (
	"slices"
	"sync"
	"time"
)

// Book keeps the state of every key across the batches one relay process has
// in flight for one source. It is safe for concurrent use. Batches must be
// finished in the order they were claimed (the engine's acker does so).
type Book struct {
	mu sync.Mutex
	// seq is the sequence number of the latest claim started.
	seq uint64
	// holder is the newest batch in flight holding each key.
	holder map[string]*Ticket
	// fence holds keys for batches claimed up to fence[k].seq: a commit
	// after their claim left the key waiting, which their snapshot missed.
	fence    map[string]fence
	fenceLog []fenceEntry
}

type fence struct {
	seq   uint64
	until time.Time
}

type fenceEntry struct {
	seq  uint64
	keys []string
}

// Ticket is one claimed batch's place in the Book.
type Ticket struct {
	seq  uint64
	keys []string
	// deps maps a key to the earlier batch in flight that holds it.
	deps map[string]*Ticket
	done chan struct{}
}

// NewBook returns an empty book.
func NewBook() *Book {
	return &Book{holder: map[string]*Ticket{}, fence: map[string]fence{}}
}

// StartClaim returns the sequence number of a claim about to start. Call it
// before the claim statement runs: a commit from then on may be one its
// snapshot does not see.
func (b *Book) StartClaim() uint64 {
	b.mu.Lock()
	defer b.mu.Unlock()
	b.seq++
	return b.seq
}

// Begin registers the batch claimed by claim seq with the order keys of its
// rows: it becomes the newest holder of each key, and depends on the batch
// that held the key before it, if that one is still in flight. Rows without
// a key are not registered.
func (b *Book) Begin(seq uint64, keys []string) *Ticket {
	t := &Ticket{seq: seq, done: make(chan struct{})}
	b.mu.Lock()
	defer b.mu.Unlock()
	for _, k := range keys {
		if k == "" {
			continue
		}
		p := b.holder[k]
		if p == t {
			continue
		}
		if p != nil {
			if t.deps == nil {
				t.deps = map[string]*Ticket{}
			}
			t.deps[k] = p
		}
		b.holder[k] = t
		t.keys = append(t.keys, k)
	}
	return t
}

// Waits reports whether the batch's rows of key k must wait for an earlier
// batch in flight to finish before they may go.
func (t *Ticket) Waits(k string) bool { return k != "" && t.deps[k] != nil }

// Deps returns the earlier batches this one waits on, oldest first.
func (t *Ticket) Deps() []*Ticket {
	var out []*Ticket
	for _, d := range t.deps {
		if !slices.Contains(out, d) {
			out = append(out, d)
		}
	}
	slices.SortFunc(out, func(a, b *Ticket) int {
		switch {
		case a.seq < b.seq:
			return -1
		case a.seq > b.seq:
			return 1
		}
		return 0
	})
	return out
}

// Done is closed once the batch has finished (committed or not).
func (t *Ticket) Done() <-chan struct{} { return t.done }

// Seq is the batch's claim sequence number.
func (t *Ticket) Seq() uint64 { return t.seq }

// May reports whether the batch's rows of key k may go now. Call it once the
// batches the key waits on are done (see Waits). It answers false, with the
// time until which the key is held, when a batch that finished after this
// one was claimed left the key waiting. Rows without a key always may.
func (b *Book) May(t *Ticket, k string) (bool, time.Time) {
	b.mu.Lock()
	defer b.mu.Unlock()
	return b.mayLocked(t, k)
}

// Sift asks May for the rows at idx (keys gives each row's order key) in one
// go, and calls held for each row that may not go.
func (b *Book) Sift(t *Ticket, keys []string, idx []int, held func(i int, until time.Time)) {
	b.mu.Lock()
	defer b.mu.Unlock()
	if len(b.fence) == 0 {
		return
	}
	for _, i := range idx {
		if ok, until := b.mayLocked(t, keys[i]); !ok {
			held(i, until)
		}
	}
}

func (b *Book) mayLocked(t *Ticket, k string) (bool, time.Time) {
	if k == "" {
		return true, time.Time{}
	}
	f, ok := b.fence[k]
	if ok && f.seq >= t.seq {
		return false, f.until
	}
	return true, time.Time{}
}

// Finish records how a batch ended and frees its keys. held maps each key
// the batch left waiting (a row of it retried or held) to the time until
// which the commit held it in the database. committed is false when the
// commit failed or the batch was released: then every key of the batch is
// pending again with no hold, and is fenced until now.
func (b *Book) Finish(t *Ticket, held map[string]time.Time, committed bool, now time.Time) {
	b.mu.Lock()
	defer b.mu.Unlock()
	var keys []string
	if committed {
		for k := range held {
			if k != "" {
				keys = append(keys, k)
			}
		}
	} else {
		keys = t.keys
	}
	if len(keys) > 0 {
		// Claims started up to now may hold later rows of these keys and
		// could not see this commit: they hold them too.
		for _, k := range keys {
			until := now
			if committed {
				until = held[k]
			}
			f := b.fence[k]
			if f.seq == b.seq && f.until.After(until) {
				until = f.until
			}
			b.fence[k] = fence{seq: b.seq, until: until}
		}
		b.fenceLog = append(b.fenceLog, fenceEntry{seq: b.seq, keys: keys})
	}
	// Batches up to this one have all finished: fences that concern only
	// them are spent.
	for len(b.fenceLog) > 0 && b.fenceLog[0].seq <= t.seq {
		e := b.fenceLog[0]
		for _, k := range e.keys {
			if b.fence[k].seq == e.seq {
				delete(b.fence, k)
			}
		}
		b.fenceLog = b.fenceLog[1:]
	}
	for _, k := range t.keys {
		if b.holder[k] == t {
			delete(b.holder, k)
		}
	}
	close(t.done)
}

// InFlight is the number of keys held by batches in flight (for tests and
// metrics).
func (b *Book) InFlight() int {
	b.mu.Lock()
	defer b.mu.Unlock()
	return len(b.holder)
}
