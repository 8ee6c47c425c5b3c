package relay

import (
	"context"
	"slices"
	"testing"
	"time"
)

// The places go by priority, then in the order asked for; a wait given up
// leaves the queue, and a place granted as it was given up passes on.
func TestSchedulerOrder(t *testing.T) {
	ctx := context.Background()
	s := NewScheduler(1)
	if err := s.For(0).Acquire(ctx); err != nil {
		t.Fatal(err)
	}
	got := make(chan string, 4)
	wait := func(name string, priority int) {
		n := s.queued()
		go func() {
			if err := s.For(priority).Acquire(ctx); err == nil {
				got <- name
			}
		}()
		// Queued before the next one asks: the order of arrival is the test.
		for deadline := time.Now().Add(5 * time.Second); s.queued() == n; time.Sleep(time.Millisecond) {
			if time.Now().After(deadline) {
				t.Fatalf("%s never queued", name)
			}
		}
	}
	wait("b", 0)
	wait("c", 5)
	wait("d", 0)
	gone, cancel := context.WithCancel(ctx)
	done := make(chan error, 1)
	go func() { done <- s.For(9).Acquire(gone) }()
	for s.queued() < 4 {
		time.Sleep(time.Millisecond)
	}
	cancel()
	if err := <-done; err == nil {
		t.Fatal("a wait given up acquired a place")
	}
	var order []string
	for range 3 {
		s.For(0).Release()
		order = append(order, <-got)
	}
	if want := []string{"c", "b", "d"}; !slices.Equal(order, want) {
		t.Fatalf("places went to %v, want %v (priority, then arrival)", order, want)
	}
	s.For(0).Release()
	if s.free != 1 {
		t.Fatalf("%d places free once all are back, want 1", s.free)
	}
}

func (s *Scheduler) queued() int {
	s.mu.Lock()
	defer s.mu.Unlock()
	return len(s.waiting)
}
