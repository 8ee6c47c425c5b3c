package app

import (
	"context"
	"log/slog"
	"slices"
	"testing"
	"time"

	"github.com/outbox-relay/outbox-relay/internal/source"
)

// endings records what a new holder asked of the lease store.
type endings struct {
	ended  []string
	marked int
}

func (e *endings) Acquire(context.Context, string, time.Duration) (*source.Lease, error) {
	return nil, nil
}
func (e *endings) Renew(context.Context, *source.Lease, time.Duration) (bool, error) {
	return true, nil
}
func (e *endings) Release(context.Context, *source.Lease) error { return nil }
func (e *endings) EndOwner(_ context.Context, owner, _ string, _ func(error)) error {
	e.ended = append(e.ended, owner)
	return nil
}
func (e *endings) Ended(context.Context, *source.Lease) error { e.marked++; return nil }

// TestNewHolderEndsEveryUnendedOwner: a lease taken over from b, which
// had not ended a's claims before losing it, makes the new holder end a's
// and b's claims before it claims, and only then record them ended.
func TestNewHolderEndsEveryUnendedOwner(t *testing.T) {
	var e endings
	a := &App{}
	l := &source.Lease{Shard: "s", Owner: "c", Term: 3, PreviousOwner: "b", Unended: []string{"a", "b"}}
	a.endPrevious(context.Background(), &Source{Name: "s"}, &e, l, slog.New(slog.DiscardHandler))
	if !slices.Equal(e.ended, []string{"a", "b"}) {
		t.Fatalf("ended the claims of %q, want a's and b's", e.ended)
	}
	if e.marked != 1 {
		t.Fatalf("recorded the owners ended %d times, want once", e.marked)
	}
}
