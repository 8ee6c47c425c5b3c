package nats

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"sync"
	"time"

	"github.com/nats-io/nats.go/jetstream"
)

// StreamWindow is what DuplicateWindow found for a subject.
type StreamWindow struct {
	// Stream is the stream that captures the subject.
	Stream string
	// Window is the stream's duplicate window.
	Window time.Duration
	// Horizon is the configured retry horizon.
	Horizon time.Duration
}

// Short reports whether a retry may come after the stream has forgotten
// the first attempt's Nats-Msg-Id, so that both copies are stored.
func (w StreamWindow) Short() bool { return w.Window < w.Horizon }

// DuplicateWindow looks up the stream that captures subject and its
// duplicate window, and logs a warning when the window is shorter than the
// retry horizon. Applications can call it at start for each route.
func (p *Publisher) DuplicateWindow(ctx context.Context, subject string) (StreamWindow, error) {
	w, err := p.window(ctx, subject)
	if err == nil && w.Short() {
		p.warnShort(ctx, subject, w)
	}
	return w, err
}

func (p *Publisher) window(ctx context.Context, subject string) (StreamWindow, error) {
	w := StreamWindow{Horizon: p.cfg.RetryHorizon.D()}
	name, err := p.js.StreamNameBySubject(ctx, subject)
	if err != nil {
		return w, fmt.Errorf("nats: find the stream of subject %q: %w", subject, err)
	}
	s, err := p.js.Stream(ctx, name)
	if err != nil {
		return w, fmt.Errorf("nats: stream %q: %w", name, err)
	}
	w.Stream, w.Window = name, s.CachedInfo().Config.Duplicates
	return w, nil
}

func (p *Publisher) warnShort(ctx context.Context, subject string, w StreamWindow) {
	p.log.WarnContext(ctx, "nats stream duplicate window is shorter than the retry horizon: a retried message may be stored twice",
		slog.String("stream", w.Stream), slog.String("subject", subject),
		slog.Duration("duplicate_window", w.Window), slog.Duration("retry_horizon", w.Horizon))
}

// maxCheckedSubjects bounds the memory of subjects already checked; when
// full it is forgotten and subjects are checked again.
const maxCheckedSubjects = 4096

// checkTimeout bounds one background check.
const checkTimeout = 10 * time.Second

// windowChecks runs DuplicateWindow in the background the first time a
// subject is published to, warning at most once per stream.
type windowChecks struct {
	p      *Publisher
	ctx    context.Context
	cancel context.CancelFunc
	wg     sync.WaitGroup

	mu       sync.Mutex
	subjects map[string]bool
	streams  map[string]bool // streams already warned about
}

func newWindowChecks(p *Publisher) *windowChecks {
	ctx, cancel := context.WithCancel(context.Background())
	return &windowChecks{p: p, ctx: ctx, cancel: cancel,
		subjects: make(map[string]bool), streams: make(map[string]bool)}
}

// check starts a check of subject unless one was made.
func (c *windowChecks) check(subject string) {
	c.mu.Lock()
	defer c.mu.Unlock()
	if c.subjects[subject] || c.ctx.Err() != nil {
		return
	}
	if len(c.subjects) >= maxCheckedSubjects {
		clear(c.subjects)
	}
	c.subjects[subject] = true
	c.wg.Go(func() { c.run(subject) })
}

func (c *windowChecks) run(subject string) {
	ctx, cancel := context.WithTimeout(c.ctx, checkTimeout)
	defer cancel()
	w, err := c.p.window(ctx, subject)
	if err != nil {
		c.p.log.Debug("nats duplicate window check", slog.String("subject", subject), slog.Any("error", err))
		// Without a stream the publish itself fails, terminally; any
		// other failure is tried again on a later publish.
		if !errors.Is(err, jetstream.ErrStreamNotFound) {
			c.forget(subject)
		}
		return
	}
	c.mu.Lock()
	warned := c.streams[w.Stream]
	if w.Short() {
		c.streams[w.Stream] = true
	}
	c.mu.Unlock()
	if w.Short() && !warned {
		c.p.warnShort(ctx, subject, w)
	}
}

func (c *windowChecks) forget(subject string) {
	c.mu.Lock()
	delete(c.subjects, subject)
	c.mu.Unlock()
}

// stop cancels the checks under way and waits for them.
func (c *windowChecks) stop() {
	c.cancel()
	c.wg.Wait()
}
