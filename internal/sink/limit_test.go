package sink

import (
	"context"
	"errors"
	"fmt"
	"slices"
	"sync"
	"sync/atomic"
	"testing"
	"time"
)

// slow publishes one message at a time per call, recording how many calls
// run at once and each key's order.
type slow struct {
	now, peak atomic.Int32
	mu        sync.Mutex
	seen      map[string][]string
	failKey   string
}

func (s *slow) Publish(_ context.Context, msgs []*Message) []error {
	n := s.now.Add(1)
	for {
		p := s.peak.Load()
		if n <= p || s.peak.CompareAndSwap(p, n) {
			break
		}
	}
	defer s.now.Add(-1)
	time.Sleep(2 * time.Millisecond)
	errs := make([]error, len(msgs))
	for i, m := range msgs {
		s.mu.Lock()
		s.seen[string(m.Key)] = append(s.seen[string(m.Key)], m.ID)
		s.mu.Unlock()
		if string(m.Key) == s.failKey {
			errs[i] = errors.New("refused")
		}
	}
	return errs
}
func (s *slow) MaxMessageBytes() int        { return 0 }
func (s *slow) Close(context.Context) error { return nil }

func TestLimitBoundsKeysInFlight(t *testing.T) {
	inner := &slow{seen: map[string][]string{}, failKey: "k3"}
	l := Limit(inner, 3)
	batches := make([][]*Message, 2)
	for c, prefix := range []string{"k", "j"} {
		for i := range 40 {
			batches[c] = append(batches[c], &Message{ID: fmt.Sprint(i), Key: []byte(fmt.Sprintf("%s%d", prefix, i%8))})
		}
	}
	var wg sync.WaitGroup
	results := make([][]error, 2)
	for c := range 2 { // two batches at once share the bound
		wg.Go(func() { results[c] = l.Publish(context.Background(), batches[c]) })
	}
	wg.Wait()
	if p := inner.peak.Load(); p > 3 || p < 2 {
		t.Errorf("%d calls in flight at once, want at most 3 (and some concurrency)", p)
	}
	for c, errs := range results {
		for i, err := range errs {
			if m := batches[c][i]; (string(m.Key) == "k3") != (err != nil) {
				t.Errorf("message %s of key %s: %v", m.ID, m.Key, err)
			}
		}
	}
	// Every key's messages went in the order given.
	for k, ids := range inner.seen {
		var want []string
		for i := range 40 {
			if fmt.Sprintf("%s%d", k[:1], i%8) == k {
				want = append(want, fmt.Sprint(i))
			}
		}
		if !slices.Equal(ids, want) {
			t.Errorf("key %s published as %v, want %v", k, ids, want)
		}
	}
}
