package app

import (
	"context"
	"sync"
	"sync/atomic"
	"testing"

	"github.com/outbox-relay/outbox-relay/internal/source/postgres"
)

// Discovery rules start sources from several goroutines at once: each
// database and channel still gets exactly one listener (run with -race).
func TestListenersOnePerDatabase(t *testing.T) {
	ctx, cancel := context.WithCancel(context.Background())
	cancel() // the listeners' Run returns at once
	var wg sync.WaitGroup
	var started atomic.Int32
	ls := &listeners{ctx: ctx, wg: &wg, start: func(db, channel string) *postgres.Listener {
		started.Add(1)
		return postgres.NewListener("postgres://127.0.0.1:1/"+db, channel, nil)
	}}
	var callers sync.WaitGroup
	got := make([]*postgres.Listener, 8)
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
