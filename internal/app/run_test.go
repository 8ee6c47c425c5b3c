package app

import (
	"context"
	"sync"
	"sync/atomic"
	"testing"

	"github.com/outbox-relay/outbox-relay/internal/source/driver"
)

// fakeListener is a listener whose Run returns at once.
type fakeListener struct{ db string }

func (*fakeListener) Run(context.Context) error                  { return nil }
func (*fakeListener) SubscribeAll() <-chan struct{}              { return nil }
func (*fakeListener) Subscribe(driver.TableName) <-chan struct{} { return nil }
func (*fakeListener) SubscribeLeases() <-chan struct{}           { return nil }

// Discovery rules start sources from several goroutines at once: each
// database and channel still gets exactly one listener (run with -race).
func TestListenersOnePerDatabase(t *testing.T) {
	ctx, cancel := context.WithCancel(context.Background())
	cancel() // the listeners' Run returns at once
	var wg sync.WaitGroup
	var started atomic.Int32
	ls := &listeners{scope: func(string) (context.Context, *sync.WaitGroup) { return ctx, &wg }, start: func(db, channel string) driver.Listener {
		started.Add(1)
		return &fakeListener{db: db}
	}}
	var callers sync.WaitGroup
	got := make([]driver.Listener, 8)
	for i := range got {
		callers.Go(func() { got[i] = ls.get([]string{"a", "b"}[i%2], "outbox_relay") })
	}
	callers.Wait()
	wg.Wait()
	if n := started.Load(); n != 2 {
		t.Fatalf("started %d listeners for 2 databases", n)
	}
	for i := range got {
		if got[i] != got[i%2] {
			t.Fatalf("caller %d got another listener than caller %d for the same database", i, i%2)
		}
	}
}
