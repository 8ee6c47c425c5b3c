package keyorder

import (
	"context"
	"errors"
	"slices"
	"sync"
	"testing"

	"github.com/outbox-relay/outbox-relay/internal/sink"
)

// broker is an asynchronous broker: a send returns at once, its answer
// (answer(i), nil by default) comes when waited for. It records the order
// of sends and of answers, and the most messages unconfirmed at once, per
// key and in all.
type broker struct {
	msgs   []*sink.Message
	answer func(i int) error

	mu          sync.Mutex
	sends       []string
	open        map[string]int
	total, peak int
	peakPerKey  int
}

func newBroker(msgs []*sink.Message) *broker {
	return &broker{msgs: msgs, open: map[string]int{}}
}

func (b *broker) start(_ context.Context, i int) (func() error, error) {
	k := sink.OrderKey(b.msgs[i])
	b.mu.Lock()
	b.sends = append(b.sends, b.msgs[i].ID)
	b.open[k]++
	b.total++
	b.peak = max(b.peak, b.total)
	if k != "" {
		b.peakPerKey = max(b.peakPerKey, b.open[k])
	}
	b.mu.Unlock()
	return func() error {
		b.mu.Lock()
		b.open[k]--
		b.total--
		b.mu.Unlock()
		if b.answer != nil {
			return b.answer(i)
		}
		return nil
	}, nil
}

// TestPipelineSendsEveryKeyAtOnce: the first message of every key is sent
// before any answer is awaited, a key's next one only after its previous
// one is answered, and at most the slots' capacity is unconfirmed.
func TestPipelineSendsEveryKeyAtOnce(t *testing.T) {
	var msgs []*sink.Message
	for seq := range 3 {
		for _, k := range []string{"a", "b", "c", "d", "e"} {
			msgs = append(msgs, msg(k, seq))
		}
	}
	b := newBroker(msgs)
	errs := Pipeline(context.Background(), msgs, make(chan struct{}, 10), 1, b.start)
	for i, err := range errs {
		if err != nil {
			t.Fatalf("message %s: %v", msgs[i].ID, err)
		}
	}
	if heads := b.sends[:5]; !slices.Equal(heads, []string{"a-0", "b-0", "c-0", "d-0", "e-0"}) {
		t.Errorf("first sends %v, want the first message of every key", heads)
	}
	if b.peakPerKey != 1 {
		t.Errorf("%d messages of one key unconfirmed at once, want 1", b.peakPerKey)
	}
	for _, k := range []string{"a", "b", "c", "d", "e"} {
		var got []string
		for _, id := range b.sends {
			if id[0] == k[0] {
				got = append(got, id)
			}
		}
		if !slices.Equal(got, []string{k + "-0", k + "-1", k + "-2"}) {
			t.Errorf("key %s sent %v, want in order", k, got)
		}
	}

	b = newBroker(msgs)
	Pipeline(context.Background(), msgs, make(chan struct{}, 2), 1, b.start)
	if b.peak != 2 {
		t.Errorf("%d unconfirmed at once with 2 slots", b.peak)
	}
}

// TestPipelineFailures: a retryable failure holds its key's later messages
// back (not sent); a terminal one lets them go; others keys go on.
func TestPipelineFailures(t *testing.T) {
	msgs := []*sink.Message{msg("a", 0), msg("b", 0), msg("a", 1), msg("b", 1), msg("a", 2)}
	down := errors.New("broker busy")
	b := newBroker(msgs)
	b.answer = func(i int) error {
		switch msgs[i].ID {
		case "a-0":
			return down
		case "b-0":
			return sink.Terminal(errors.New("too large"))
		}
		return nil
	}
	errs := Pipeline(context.Background(), msgs, make(chan struct{}, 4), 1, b.start)
	if !errors.Is(errs[0], down) || !errors.Is(errs[2], ErrHeldBack) || !errors.Is(errs[4], ErrHeldBack) {
		t.Errorf("key a: %v; want its first failed and the rest held back", errs)
	}
	if !sink.IsTerminal(errs[1]) || errs[3] != nil {
		t.Errorf("key b: %v, %v; want the terminal failure, then the next sent", errs[1], errs[3])
	}
	if !slices.Equal(b.sends, []string{"a-0", "b-0", "b-1"}) {
		t.Errorf("sent %v, want a-0, b-0, b-1", b.sends)
	}
}

// TestPipelineSharedSlots: calls sharing fewer slots than they have keys
// each finish.
func TestPipelineSharedSlots(t *testing.T) {
	slots := make(chan struct{}, 1)
	var wg sync.WaitGroup
	for c := range 4 {
		wg.Go(func() {
			msgs := []*sink.Message{msg("x", c), msg("y", c), msg("x", c+10)}
			for i, err := range Pipeline(context.Background(), msgs, slots, 1, newBroker(msgs).start) {
				if err != nil {
					t.Errorf("call %d message %d: %v", c, i, err)
				}
			}
		})
	}
	wg.Wait()
}

// TestPipelineCancelled: once the context ends, nothing more is sent.
func TestPipelineCancelled(t *testing.T) {
	ctx, cancel := context.WithCancel(context.Background())
	msgs := []*sink.Message{msg("a", 0), msg("a", 1), msg("b", 0)}
	b := newBroker(msgs)
	b.answer = func(i int) error {
		cancel()
		return nil
	}
	errs := Pipeline(ctx, msgs, make(chan struct{}, 1), 1, b.start)
	if errs[0] != nil || !errors.Is(errs[1], context.Canceled) || !errors.Is(errs[2], context.Canceled) {
		t.Errorf("results %v: want the first delivered, the rest not sent", errs)
	}
	if !slices.Equal(b.sends, []string{"a-0"}) {
		t.Errorf("sent %v after the context ended", b.sends)
	}
}

// TestPipelineDepth: with a depth above one, a key's messages go together,
// at most depth unconfirmed; a retryable failure holds back what of its key
// was not sent yet, and is made terminal (overtaken) when a later message
// of its key, already sent, was delivered.
func TestPipelineDepth(t *testing.T) {
	msgs := []*sink.Message{msg("a", 0), msg("a", 1), msg("a", 2), msg("a", 3), msg("b", 0), msg("b", 1)}
	down := errors.New("queue full")
	b := newBroker(msgs)
	b.answer = func(i int) error {
		if msgs[i].ID == "a-0" || msgs[i].ID == "b-0" {
			return down
		}
		return nil
	}
	errs := Pipeline(context.Background(), msgs, make(chan struct{}, 10), 2, b.start)
	if b.peakPerKey != 2 {
		t.Errorf("%d of one key unconfirmed at once, want 2", b.peakPerKey)
	}
	if !sink.IsTerminal(errs[0]) || !errors.Is(errs[0], ErrOvertaken) || !errors.Is(errs[0], down) {
		t.Errorf("a-0: %v; want its failure made terminal, overtaken by a-1", errs[0])
	}
	if errs[1] != nil || !errors.Is(errs[2], ErrHeldBack) || !errors.Is(errs[3], ErrHeldBack) {
		t.Errorf("a-1..a-3: %v; want a-1 delivered, the rest held back", errs[1:4])
	}
	if !sink.IsTerminal(errs[4]) || errs[5] != nil {
		t.Errorf("b: %v; want b-0 overtaken by b-1", errs[4:])
	}
	if slices.Contains(b.sends, "a-2") || slices.Contains(b.sends, "a-3") {
		t.Errorf("sent %v: a key's messages went on after its failure", b.sends)
	}
}
