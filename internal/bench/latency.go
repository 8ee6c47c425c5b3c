package bench

import (
	"context"
	"fmt"
	"strconv"
	"sync"
	"time"

	"github.com/HdrHistogram/hdrhistogram-go"
	"github.com/twmb/franz-go/pkg/kadm"
	"github.com/twmb/franz-go/pkg/kgo"
)

// tracker measures commit-to-publish latency: producers report each row's
// commit time, the consumer each row's arrival; whichever comes second
// records arrival minus commit in an HDR histogram (microseconds). Latency is
// taken from the commit, not from when the relay got to the row, so a stalled
// relay shows in the tail (no coordinated omission).
type tracker struct {
	mu       sync.Mutex
	commits  map[int64]int64 // id -> commit time, unix ns
	arrivals map[int64]int64 // id -> arrival time, for rows seen before their commit was reported
	hist     *hdrhistogram.Histogram
	received int
	dups     int
	seen     map[int64]bool
}

func newTracker() *tracker {
	return &tracker{
		commits: map[int64]int64{}, arrivals: map[int64]int64{}, seen: map[int64]bool{},
		hist: hdrhistogram.New(1, int64(10*time.Minute/time.Microsecond), 3),
	}
}

func (t *tracker) committed(ids []int64, at time.Time) {
	ns := at.UnixNano()
	t.mu.Lock()
	defer t.mu.Unlock()
	for _, id := range ids {
		if arr, ok := t.arrivals[id]; ok {
			delete(t.arrivals, id)
			t.record(arr - ns)
			continue
		}
		t.commits[id] = ns
	}
}

func (t *tracker) arrived(id int64, at time.Time) {
	ns := at.UnixNano()
	t.mu.Lock()
	defer t.mu.Unlock()
	if t.seen[id] {
		t.dups++
		return
	}
	t.seen[id] = true
	t.received++
	if c, ok := t.commits[id]; ok {
		delete(t.commits, id)
		t.record(ns - c)
		return
	}
	t.arrivals[id] = ns
}

func (t *tracker) record(ns int64) {
	_ = t.hist.RecordValue(max(ns/1000, 1))
}

func (t *tracker) count() int {
	t.mu.Lock()
	defer t.mu.Unlock()
	return t.received
}

// Latency is a latency distribution in milliseconds.
type Latency struct {
	Count int64   `json:"count"`
	P50   float64 `json:"p50_ms"`
	P99   float64 `json:"p99_ms"`
	P999  float64 `json:"p999_ms"`
	Max   float64 `json:"max_ms"`
}

func (t *tracker) latency() Latency {
	t.mu.Lock()
	defer t.mu.Unlock()
	ms := func(us int64) float64 { return float64(us) / 1000 }
	return Latency{
		Count: t.hist.TotalCount(),
		P50:   ms(t.hist.ValueAtQuantile(50)), P99: ms(t.hist.ValueAtQuantile(99)),
		P999: ms(t.hist.ValueAtQuantile(99.9)), Max: ms(t.hist.Max()),
	}
}

// consumerFromEnd is a client consuming the benchmark topic from its end
// offsets as they are now, before any row of the run is written.
func consumerFromEnd(ctx context.Context, brokers []string) (*kgo.Client, error) {
	admin, err := kgo.NewClient(kgo.SeedBrokers(brokers...))
	if err != nil {
		return nil, err
	}
	ends, err := kadm.NewClient(admin).ListEndOffsets(ctx, topic)
	admin.Close()
	if err != nil {
		return nil, fmt.Errorf("read end offsets: %w", err)
	}
	from := map[string]map[int32]kgo.Offset{topic: {}}
	ends.Each(func(o kadm.ListedOffset) { from[topic][o.Partition] = kgo.NewOffset().At(o.Offset) })
	return kgo.NewClient(kgo.SeedBrokers(brokers...), kgo.ConsumePartitions(from), kgo.FetchMaxWait(10*time.Millisecond))
}

// consume reports arrivals on the benchmark topic to t until stopped.
func consume(ctx context.Context, brokers []string, t *tracker) (func(), error) {
	cl, err := consumerFromEnd(ctx, brokers)
	if err != nil {
		return nil, err
	}
	cctx, cancel := context.WithCancel(ctx)
	done := make(chan struct{})
	go func() {
		defer close(done)
		for cctx.Err() == nil {
			fs := cl.PollFetches(cctx)
			now := time.Now()
			fs.EachRecord(func(r *kgo.Record) {
				for _, h := range r.Headers {
					if h.Key == "event_id" {
						if id, err := strconv.ParseInt(string(h.Value), 10, 64); err == nil {
							t.arrived(id, now)
						}
					}
				}
			})
		}
	}()
	return func() { cancel(); <-done; cl.Close() }, nil
}
