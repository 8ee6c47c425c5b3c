package relay

import (
	"context"
	"slices"
	"sync"
)

// Gate shares a database's claim transactions among the workers that claim
// from it: a batch holds a place from its claim to its completion (its
// transaction's connection). Acquire waits for a place; Release gives it
// back.
type Gate interface {
	Acquire(ctx context.Context) error
	Release()
}

// Scheduler hands out a database's places to claim in priority order, and
// among equal priorities in the order they were asked for: a worker asks
// again for each batch, so workers of one priority take turns (round robin)
// and a busy source with many batches in flight cannot keep the others
// from claiming. A source of higher priority claims before any of lower
// priority that waits.
type Scheduler struct {
	mu      sync.Mutex
	free    int
	seq     uint64
	waiting []*waiter // by priority (highest first), then by arrival
}

type waiter struct {
	priority int
	seq      uint64
	ready    chan struct{}
	granted  bool
}

// NewScheduler returns a scheduler of places places (at least one).
func NewScheduler(places int) *Scheduler { return &Scheduler{free: max(places, 1)} }

// For is the gate of a worker of the given priority.
func (s *Scheduler) For(priority int) Gate { return gate{s, priority} }

type gate struct {
	s        *Scheduler
	priority int
}

func (g gate) Acquire(ctx context.Context) error { return g.s.acquire(ctx, g.priority) }
func (g gate) Release()                          { g.s.release() }

func (s *Scheduler) acquire(ctx context.Context, priority int) error {
	s.mu.Lock()
	if s.free > 0 && len(s.waiting) == 0 {
		s.free--
		s.mu.Unlock()
		return nil
	}
	w := &waiter{priority: priority, seq: s.seq, ready: make(chan struct{})}
	s.seq++
	i, _ := slices.BinarySearchFunc(s.waiting, w, func(a, b *waiter) int {
		if a.priority != b.priority {
			return b.priority - a.priority
		}
		return int(a.seq - b.seq)
	})
	s.waiting = slices.Insert(s.waiting, i, w)
	s.mu.Unlock()
	select {
	case <-w.ready:
		return nil
	case <-ctx.Done():
		s.mu.Lock()
		granted := w.granted
		if !granted {
			s.waiting = slices.DeleteFunc(s.waiting, func(x *waiter) bool { return x == w })
		}
		s.mu.Unlock()
		if granted {
			s.release() // granted as the wait ended: pass it on
		}
		return ctx.Err()
	}
}

func (s *Scheduler) release() {
	s.mu.Lock()
	defer s.mu.Unlock()
	if len(s.waiting) == 0 {
		s.free++
		return
	}
	w := s.waiting[0]
	s.waiting = s.waiting[1:]
	w.granted = true
	close(w.ready)
}
