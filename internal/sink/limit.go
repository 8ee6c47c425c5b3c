package sink

import (
	"context"
	"sync"
)

// Limited is a Publisher that keeps at most n keys' messages in flight at
// once through p: each key's messages go in one call of their own, in the
// order given, and at most n such calls run at a time, across every
// Publish. It bounds what one route sends to a destination at once.
type Limited struct {
	p   Publisher
	sem chan struct{}
}

// Limit wraps p so that at most n keys are in flight at once.
func Limit(p Publisher, n int) *Limited {
	return &Limited{p: p, sem: make(chan struct{}, max(n, 1))}
}

// Publish implements Publisher.
func (l *Limited) Publish(ctx context.Context, msgs []*Message) []error {
	errs := make([]error, len(msgs))
	var groups [][]int
	byKey := map[string]int{}
	for i, m := range msgs {
		k := OrderKey(m)
		if k == "" {
			groups = append(groups, []int{i})
			continue
		}
		g, ok := byKey[k]
		if !ok {
			g = len(groups)
			byKey[k] = g
			groups = append(groups, nil)
		}
		groups[g] = append(groups[g], i)
	}
	var wg sync.WaitGroup
	for _, g := range groups {
		select {
		case l.sem <- struct{}{}:
		case <-ctx.Done():
			for _, i := range g {
				errs[i] = ctx.Err()
			}
			continue
		}
		wg.Go(func() {
			defer func() { <-l.sem }()
			part := make([]*Message, len(g))
			for j, i := range g {
				part[j] = msgs[i]
			}
			for j, err := range l.p.Publish(ctx, part) {
				errs[g[j]] = err
			}
		})
	}
	wg.Wait()
	return errs
}

// MaxMessageBytes implements Publisher.
func (l *Limited) MaxMessageBytes() int { return l.p.MaxMessageBytes() }

// Close is a no-op: the wrapped sink is shared and closed by its owner.
func (l *Limited) Close(context.Context) error { return nil }

// Unwrap returns the wrapped sink.
func (l *Limited) Unwrap() Publisher { return l.p }

// Status is the wrapped sink's (its circuit's), when it says.
func (l *Limited) Status() string {
	if s, ok := l.p.(interface{ Status() string }); ok {
		return s.Status()
	}
	return "ok"
}
