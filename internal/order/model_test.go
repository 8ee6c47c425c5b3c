package order

import (
	"fmt"
	"math/rand/v2"
	"slices"
	"testing"
	"time"
)

// The model test drives the Book, Plan, Judge and Schedule through random
// interleavings of claims, publishes, sink results (ok, retryable, terminal,
// unavailable), commits, failed commits and hand-overs, against a simulated
// database that claims rows as the claim statement does (in order, skipping
// locked rows, rows not yet due and keys held by retry state). It checks the
// reference rules: no row of a key is first delivered before every earlier
// row of its key was delivered or dead-lettered (or is poison: refused for
// good, never to be published); once failures stop, every row ends
// published or dead-lettered (nothing is held for ever).

const (
	simKeys      = 6
	simBudget    = 3
	simBatchSize = 4
	simPipeline  = 3
)

type simRow struct {
	id       int
	key      string
	pos      int
	poison   bool
	state    int // 0 pending, 1 published, 2 dead
	attempts int
	own      int       // retryable failures of its own (not caused by an earlier row)
	until    time.Time // retry state: not due (and its key held) before this
	lockedBy *simBatch
}

type simBatch struct {
	t       *Ticket
	rows    []*simRow
	results []Result
	at      []time.Time // own times (unavailable sink, fence)
	phase   int         // 0 claimed, 1 free keys sent, 2 all sent
}

type sim struct {
	t         *testing.T
	rng       *rand.Rand
	now       time.Time
	rows      []*simRow
	book      *Book
	inflight  []*simBatch
	delivered map[int]bool
	failures  bool
	log       []string
	nextPos   int
}

func (s *sim) logf(format string, args ...any) {
	s.log = append(s.log, fmt.Sprintf(format, args...))
}

func (s *sim) keyHeld(k string) bool {
	if k == "" {
		return false
	}
	for _, r := range s.rows {
		if r.key == k && r.state == 0 && r.until.After(s.now) {
			return true
		}
	}
	return false
}

func (s *sim) insert() {
	n := 1 + s.rng.IntN(3)
	for range n {
		k := ""
		if s.rng.IntN(5) > 0 {
			k = fmt.Sprintf("k%d", s.rng.IntN(simKeys))
		}
		s.nextPos++
		s.rows = append(s.rows, &simRow{id: s.nextPos, key: k, pos: s.nextPos, poison: s.rng.IntN(25) == 0})
	}
}

func (s *sim) claim() {
	if len(s.inflight) >= simPipeline {
		return
	}
	seq := s.book.StartClaim()
	b := &simBatch{}
	for _, r := range s.rows { // rows are in pos order
		if len(b.rows) == simBatchSize {
			break
		}
		if r.state != 0 || r.lockedBy != nil || r.until.After(s.now) || s.keyHeld(r.key) {
			continue
		}
		r.lockedBy = b
		b.rows = append(b.rows, r)
	}
	if len(b.rows) == 0 {
		return
	}
	keys := make([]string, len(b.rows))
	for i, r := range b.rows {
		keys[i] = r.key
	}
	b.t = s.book.Begin(seq, keys)
	b.results = make([]Result, len(b.rows))
	b.at = make([]time.Time, len(b.rows))
	s.inflight = append(s.inflight, b)
	s.logf("claim seq=%d rows=%v", seq, ids(b.rows))
}

func ids(rs []*simRow) []string {
	var out []string
	for _, r := range rs {
		out = append(out, fmt.Sprintf("%d/%s", r.id, r.key))
	}
	return out
}

// publish sends the batch's rows whose key does not wait (phase 0), or, once
// the batches they wait on are done, the rest (phase 1).
func (s *sim) publish(b *simBatch) bool {
	var idx []int
	switch b.phase {
	case 0:
		for i, r := range b.rows {
			if !b.t.Waits(r.key) {
				idx = append(idx, i)
			}
		}
	case 1:
		for _, d := range b.t.Deps() {
			select {
			case <-d.Done():
			default:
				return false
			}
		}
		for i, r := range b.rows {
			if b.t.Waits(r.key) {
				idx = append(idx, i)
			}
		}
	default:
		return false
	}
	b.phase++
	keys := make([]string, len(b.rows))
	dests := make([]string, len(b.rows))
	for i, r := range b.rows {
		keys[i] = r.key
		dests[i] = fmt.Sprint(r.id % 2) // two destinations: waves happen
	}
	p := NewPlan(keys, idx, func(i, j int) bool { return dests[i] == dests[j] })
	for w := range p.Waves() {
		send, held := p.Wave(w)
		for _, i := range held {
			b.results[i] = NotSent
			p.Record(i, NotSent)
		}
		// One sink call: after a key's retryable failure, its later
		// messages in the call fail too (the sink contract).
		failedInCall := map[string]bool{}
		for _, i := range send {
			r := b.rows[i]
			if ok, until := s.book.May(b.t, r.key); !ok {
				b.results[i], b.at[i] = NotSent, until
				p.Record(i, NotSent)
				continue
			}
			res := OK
			switch {
			case r.key != "" && failedInCall[r.key]:
				res = Failed
			case r.poison:
				res = Terminal
			case s.failures && s.rng.IntN(8) == 0:
				res = Failed
				r.own++
			case s.failures && s.rng.IntN(16) == 0:
				res = Unavailable
				b.at[i] = s.now.Add(2 * time.Second)
			}
			if res == Failed || res == Unavailable {
				failedInCall[r.key] = true
			}
			b.results[i] = res
			p.Record(i, res)
			if res == OK {
				s.deliver(r)
			}
		}
	}
	s.logf("publish seq=%d phase=%d results=%v", b.t.Seq(), b.phase, b.results)
	return true
}

func (s *sim) deliver(r *simRow) {
	if s.delivered[r.id] {
		return
	}
	if r.key != "" {
		for _, e := range s.rows {
			if e.key == r.key && e.pos < r.pos && !s.delivered[e.id] && e.state != 2 && !e.poison {
				s.t.Fatalf("row %d of key %s delivered before row %d\n%s", r.id, r.key, e.id, s.trace())
			}
		}
	}
	s.delivered[r.id] = true
}

func (s *sim) trace() string {
	from := max(0, len(s.log)-40)
	out := ""
	for _, l := range s.log[from:] {
		out += l + "\n"
	}
	return out
}

// commit completes the oldest batch once it is published: its outcome
// commits, or (at random) the commit fails and its rows are pending again.
func (s *sim) commit() bool {
	if len(s.inflight) == 0 || s.inflight[0].phase < 2 {
		return false
	}
	b := s.inflight[0]
	s.inflight = s.inflight[1:]
	keys := make([]string, len(b.rows))
	for i, r := range b.rows {
		keys[i] = r.key
		r.lockedBy = nil
	}
	if s.failures && s.rng.IntN(20) == 0 {
		s.book.Finish(b.t, nil, false, s.now)
		s.logf("commit seq=%d failed", b.t.Seq())
		return true
	}
	v := Judge(keys, b.results, true)
	if v.Violations > 0 {
		s.t.Fatalf("violation in batch %d: %v\n%s", b.t.Seq(), b.results, s.trace())
	}
	for i, f := range v.Fates {
		if f == Retry {
			if b.rows[i].attempts+1 >= simBudget {
				v.Fates[i] = Dead
				continue
			}
			b.at[i] = s.now.Add(time.Duration(1+s.rng.IntN(3)) * time.Second)
		}
	}
	held := Schedule(keys, v.Fates, b.at, s.now.Add(time.Second))
	for i, f := range v.Fates {
		r := b.rows[i]
		switch f {
		case Published:
			r.state, r.until = 1, time.Time{}
		case Dead:
			r.state, r.until = 2, time.Time{}
		case Retry:
			r.attempts++
			if r.attempts > r.own {
				s.t.Fatalf("row %d charged %d attempts for %d failures of its own\n%s", r.id, r.attempts, r.own, s.trace())
			}
			r.until = b.at[i]
		case Hold:
			r.until = b.at[i]
		}
	}
	s.book.Finish(b.t, held, true, s.now)
	s.logf("commit seq=%d fates=%v held=%v", b.t.Seq(), v.Fates, held)
	return true
}

// handOver drops every batch in flight (their transactions end, their rows
// are pending again) and starts a new Book, as a new holder does.
func (s *sim) handOver() {
	for _, b := range s.inflight {
		for _, r := range b.rows {
			r.lockedBy = nil
		}
	}
	s.inflight = nil
	s.book = NewBook()
	s.logf("hand-over")
}

func (s *sim) step() {
	switch n := s.rng.IntN(20); {
	case n < 3:
		s.insert()
	case n < 8:
		s.claim()
	case n < 14:
		if len(s.inflight) > 0 {
			s.publish(s.inflight[s.rng.IntN(len(s.inflight))])
		}
	case n < 18:
		s.commit()
	case n < 19:
		s.now = s.now.Add(time.Duration(s.rng.IntN(1500)) * time.Millisecond)
	default:
		if s.failures && s.rng.IntN(10) == 0 {
			s.handOver()
		}
	}
}

func TestModel(t *testing.T) {
	runs := 400
	if testing.Short() {
		runs = 50
	}
	for seed := range runs {
		s := &sim{t: t, rng: rand.New(rand.NewPCG(uint64(seed), 7)), now: time.Unix(1e9, 0),
			book: NewBook(), delivered: map[int]bool{}, failures: true}
		for range 400 {
			s.step()
		}
		// Failures stop: everything must settle.
		s.failures = false
		for i := 0; ; i++ {
			if i > 20000 {
				var left []string
				for _, r := range s.rows {
					if r.state == 0 {
						left = append(left, fmt.Sprintf("%d/%s until=%v", r.id, r.key, r.until.Sub(s.now)))
					}
				}
				t.Fatalf("seed %d: rows never settle: %v\n%s", seed, left, s.trace())
			}
			progressed := false
			for _, b := range slices.Clone(s.inflight) {
				progressed = s.publish(b) || progressed
			}
			progressed = s.commit() || progressed
			before := len(s.inflight)
			s.claim()
			progressed = progressed || len(s.inflight) > before
			if progressed {
				continue
			}
			pending := slices.ContainsFunc(s.rows, func(r *simRow) bool { return r.state == 0 })
			if !pending && len(s.inflight) == 0 {
				break
			}
			s.now = s.now.Add(500 * time.Millisecond)
		}
		for _, r := range s.rows {
			if r.state == 1 && !s.delivered[r.id] {
				t.Fatalf("seed %d: row %d acknowledged but never delivered", seed, r.id)
			}
			if r.poison && r.state != 2 {
				t.Fatalf("seed %d: poison row %d not dead-lettered", seed, r.id)
			}
		}
		if s.book.InFlight() != 0 {
			t.Fatalf("seed %d: keys still held by finished batches: %d", seed, s.book.InFlight())
		}
	}
}
