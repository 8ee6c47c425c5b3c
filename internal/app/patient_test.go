package app

import (
	"context"
	"errors"
	"testing"
	"time"

	"github.com/outbox-relay/outbox-relay/internal/config"
	"github.com/outbox-relay/outbox-relay/internal/sink"
)

// blockingSink answers no call until release is closed.
type blockingSink struct {
	calls   chan struct{}
	release chan struct{}
}

func (b *blockingSink) Publish(ctx context.Context, msgs []*sink.Message) []error {
	b.calls <- struct{}{}
	<-b.release
	return make([]error, len(msgs))
}

func (*blockingSink) MaxMessageBytes() int        { return 1 << 20 }
func (*blockingSink) Close(context.Context) error { return nil }

// TestBucketsHaveTheirOwnSinkBudget: each bucket of a source waits for its
// sink with a budget of its own (a pipeline of calls): while the calls of
// bucket 0 spend its budget, bucket 1 still calls the sink. A bucket keeps
// its patient sink across its workers.
func TestBucketsHaveTheirOwnSinkBudget(t *testing.T) {
	a := &App{cfg: &config.Config{Sinks: map[string]config.Sink{"k": {BatchWait: config.Duration(time.Minute)}}}}
	under := &blockingSink{calls: make(chan struct{}, 4), release: make(chan struct{})}
	defer close(under.release)
	patient := a.patientSinks(config.Source{Sink: "k", Pipeline: 1}, under, nil)
	p0, _ := patient(0)
	if again, _ := patient(0); again != p0 {
		t.Fatal("bucket 0 got another patient sink the second time")
	}
	p1, _ := patient(1)
	msgs := func() []*sink.Message { return []*sink.Message{{ID: "1"}} }
	go p0.Publish(context.Background(), msgs()) // spends bucket 0's budget
	<-under.calls
	if _, unavailable := sink.IsUnavailable(p0.Publish(context.Background(), msgs())[0]); !unavailable {
		t.Fatal("bucket 0 called the sink beyond its budget")
	}
	errs := make(chan error, 1)
	go func() { errs <- p1.Publish(context.Background(), msgs())[0] }()
	select {
	case <-under.calls:
	case err := <-errs:
		if errors.Is(err, sink.ErrBudgetSpent) {
			t.Fatal("bucket 1 found its budget spent by the calls of bucket 0")
		}
		t.Fatalf("bucket 1's call answered %v without calling the sink", err)
	case <-time.After(10 * time.Second):
		t.Fatal("bucket 1 did not call the sink")
	}
}
