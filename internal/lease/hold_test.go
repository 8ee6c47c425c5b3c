package lease

import (
	"context"
	"sync"
	"testing"
	"time"
)

// handing is a Store whose one shard is held by another live replica until
// the test hands it to "me"; its first read of the row waits until the test
// says so, and returns the row as it was when the read began.
type handing struct {
	Store // nil: Hold needs only the methods below

	mu      sync.Mutex
	row     Row
	reads   int
	reading chan struct{} // closed when the first read has begun
	proceed chan struct{} // closed by the test: the first read returns
}

func (s *handing) Get(context.Context, *GetParams) (*Row, error) {
	s.mu.Lock()
	r := s.row
	s.reads++
	first := s.reads == 1
	s.mu.Unlock()
	if first {
		close(s.reading)
		<-s.proceed
	}
	return &r, nil
}

func (s *handing) handOver(to string) {
	s.mu.Lock()
	s.row = Row{Owner: s.row.Owner, Term: s.row.Term, Expired: true, Successor: to, Reserved: true}
	s.mu.Unlock()
}

func (s *handing) Alive(context.Context, *AliveParams) (bool, error) { return true, nil }

func (s *handing) Take(_ context.Context, p *TakeParams) (bool, error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.row.Owner != p.Holder || s.row.Term != p.Term || !s.row.Expired {
		return false, nil
	}
	s.row = Row{Owner: p.Owner, Term: p.Term + 1}
	return true, nil
}

func (s *handing) Expire(context.Context, *ExpireParams) error { return nil }

func (s *handing) Census(context.Context, *CensusParams) ([]Replica, error) {
	return []Replica{{Owner: "me", Left: time.Minute, Session: true}, {Owner: "other", Left: time.Minute, Session: true, Holds: 1}}, nil
}

// TestStandbyWakesAtACensusDuringItsAttempt: a shard standing by tries
// again at every census. A census that comes while it is reading its lease
// (a hand-over to it, told by a NOTIFY or a bell, whose census came before
// the attempt had seen the row change) must not be missed: the shard would
// wait for the next census, a third of the TTL later.
func TestStandbyWakesAtACensusDuringItsAttempt(t *testing.T) {
	t.Parallel()
	ctx, cancel := context.WithCancel(context.Background())
	st := &handing{row: Row{Owner: "other", Term: 1}, reading: make(chan struct{}), proceed: make(chan struct{})}
	b := NewBalancer(New(st, "me"), time.Minute, nil) // no Run: the test takes the censuses
	if _, err := b.census(ctx); err != nil {
		t.Fatal(err)
	}
	started := make(chan struct{})
	done := make(chan struct{})
	go func() {
		defer close(done)
		b.Hold(ctx, HoldOptions{Shard: "s"}, func(ctx context.Context) { close(started); <-ctx.Done() })
	}()
	defer func() { cancel(); <-done }()
	<-st.reading
	st.handOver("me")
	if _, err := b.census(ctx); err != nil {
		t.Fatal(err)
	}
	close(st.proceed) // the attempt saw the row as it was: another's
	select {
	case <-started:
	case <-time.After(5 * time.Second):
		t.Fatal("the shard handed over was not taken at the census that came during the attempt")
	}
}
