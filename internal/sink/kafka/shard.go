package kafka

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"slices"
	"sync"
	"time"

	"github.com/twmb/franz-go/pkg/kadm"
	"github.com/twmb/franz-go/pkg/kgo"
	"golang.org/x/sync/errgroup"

	"github.com/outbox-relay/outbox-relay/internal/config"
	"github.com/outbox-relay/outbox-relay/internal/sink"
)

// Shard is the exactly-once producer of one shard (a source): a
// transactional client whose id is derived from the shard alone, and the
// shard's progress, written to a compacted topic inside each transaction.
//
// A batch's messages and a progress record naming the ids they carry (with
// those of earlier transactions whose database commit is not confirmed yet)
// commit together or not at all. A new holder of the shard takes it over
// (Lanes.Recover): initialising the producer id fences any earlier holder
// and aborts its open transaction; the latest committed progress record
// then names every event that reached Kafka and that the database may not
// yet mark.
type Shard struct {
	*Publisher // publishes into the open transaction
	admin      *kadm.Client
	cfg        config.Sink
	shard      string
	topic      string // the progress topic

	mu sync.Mutex // held from Begin to Commit or Abort
	// unconfirmed are the ids of committed transactions whose database
	// commit has not been confirmed, by transaction.
	umu         sync.Mutex
	unconfirmed map[uint64][]string
	txn         uint64
}

// progress is the value of a progress record.
type progress struct {
	Shard string    `json:"shard"`
	IDs   []string  `json:"ids"`
	At    time.Time `json:"at"`
}

// TransactionalID is the transactional id of shard: the same on every
// replica, so that a new holder fences the previous one.
func TransactionalID(prefix, shard string) string { return prefix + shard }

// NewShard connects the shard's transactional producer; shard is the key
// of its progress records, unique among the relays sharing progressTopic.
func NewShard(cfg config.Sink, transactionalID, shard, progressTopic string, opts ...Option) (*Shard, error) {
	txnTimeout := cfg.TransactionTimeout.D()
	if txnTimeout <= 0 {
		txnTimeout = max(cfg.Timeout.D()+10*time.Second, 60*time.Second)
	}
	opts = append(opts, transactional(transactionalID, txnTimeout))
	p, err := New(cfg, opts...)
	if err != nil {
		return nil, err
	}
	return &Shard{Publisher: p, admin: kadm.NewClient(p.client), cfg: cfg, shard: shard, topic: progressTopic,
		unconfirmed: map[uint64][]string{}}, nil
}

// fence initialises the producer id: it fences any earlier holder of the
// transactional id and ends its open transaction (aborted, its markers
// written), so that everything the shard ever wrote is decided.
func (s *Shard) fence(ctx context.Context) error {
	if _, _, err := s.client.ProducerID(ctx); err != nil {
		return fmt.Errorf("exactly-once: initialise the producer of shard %s: %w", s.shard, err)
	}
	return nil
}

// readProgress reads topic as read_committed consumers see it, to the end
// each partition has now (its high watermark), and returns the ids of the
// latest record of each of shards. Call it once every shard is fenced: all
// their records before the end are then decided.
//
// The read goes to the high watermark, not to the last stable offset that a
// read_committed listing returns: a transaction of another producer still
// open on the topic (another source's, or a lane not fenced yet) holds the
// last stable offset back, and a shard's own record committed after that
// transaction began lies beyond it; reading only that far returned an older
// record, and the events of the newer one were sent again. Such a
// transaction ends soon (it writes its progress just before its commit), or
// at its transaction timeout; the read waits for it. Transaction markers
// come back too, so a partition whose last records were aborted is also
// read to its end.
func readProgress(ctx context.Context, cfg config.Sink, admin *kadm.Client, topic string, shards []string) (map[string][]string, error) {
	ends, err := admin.ListEndOffsets(ctx, topic)
	if err != nil {
		return nil, fmt.Errorf("exactly-once: progress topic %q: %w", topic, err)
	}
	if err := ends.Error(); err != nil {
		return nil, fmt.Errorf("exactly-once: progress topic %q: %w", topic, err)
	}
	want := map[int32]int64{}
	ends.Each(func(o kadm.ListedOffset) {
		if o.Offset > 0 {
			want[o.Partition] = o.Offset
		}
	})
	got := map[string][]string{}
	if len(want) == 0 {
		return got, nil
	}
	kopts, err := consumerOpts(cfg, topic)
	if err != nil {
		return nil, err
	}
	cl, err := kgo.NewClient(kopts...)
	if err != nil {
		return nil, err
	}
	defer cl.Close()
	for len(want) > 0 {
		fs := cl.PollFetches(ctx)
		if err := ctx.Err(); err != nil {
			return nil, fmt.Errorf("exactly-once: read progress topic %q: %w", topic, err)
		}
		if err := fs.Err0(); err != nil {
			return nil, fmt.Errorf("exactly-once: read progress topic %q: %w", topic, err)
		}
		fs.EachRecord(func(r *kgo.Record) {
			end, ok := want[r.Partition]
			if !ok {
				return
			}
			if r.Offset < end && !r.Attrs.IsControl() && slices.Contains(shards, string(r.Key)) {
				var p progress
				if json.Unmarshal(r.Value, &p) == nil {
					got[string(r.Key)] = p.IDs
				}
			}
			if r.Offset+1 >= end {
				delete(want, r.Partition)
			}
		})
	}
	return got, nil
}

// consumerOpts reads topic from the start, committed records and
// transaction markers only.
func consumerOpts(cfg config.Sink, topic string) ([]kgo.Opt, error) {
	s, err := settingsFor(cfg)
	if err != nil {
		return nil, err
	}
	return append(s.connOpts, kgo.ConsumeTopics(topic), kgo.ConsumeResetOffset(kgo.NewOffset().AtStart()),
		kgo.FetchIsolationLevel(kgo.ReadCommitted()), kgo.KeepControlRecords(), kgo.FetchMaxWait(200*time.Millisecond)), nil
}

// Begin opens the shard's transaction for one batch, waiting for the
// previous batch's to end.
func (s *Shard) Begin(ctx context.Context) error {
	s.mu.Lock()
	if err := s.client.BeginTransaction(); err != nil {
		s.mu.Unlock()
		return fmt.Errorf("exactly-once: begin: %w", err)
	}
	return nil
}

// ErrAborted says a batch's transaction was aborted: none of its messages
// is visible to read_committed consumers.
var ErrAborted = errors.New("the Kafka transaction was aborted")

// Commit writes the progress record (ids, with the earlier unconfirmed
// ones) and commits the transaction; failed says a message of the batch
// failed, which aborts it. It returns the transaction's number for
// Confirm; ErrAborted (wrapped) when nothing was committed, and
// sink.ErrTxnUnknown when the commit got no clear answer.
func (s *Shard) Commit(ctx context.Context, ids []string, failed bool) (uint64, error) {
	defer s.mu.Unlock()
	try := kgo.TryCommit
	var perr error
	if failed {
		try = kgo.TryAbort
	} else {
		s.umu.Lock()
		all := append([]string(nil), ids...)
		for _, u := range s.unconfirmed {
			all = append(all, u...)
		}
		s.umu.Unlock()
		v, err := json.Marshal(progress{Shard: s.shard, IDs: all, At: time.Now().UTC()})
		if err != nil {
			return 0, err
		}
		perr = s.client.ProduceSync(ctx, &kgo.Record{Topic: s.topic, Key: []byte(s.shard), Value: v}).FirstErr()
		if perr != nil {
			try = kgo.TryAbort
		}
	}
	if err := s.client.Flush(ctx); err != nil && try == kgo.TryCommit {
		try, perr = kgo.TryAbort, err
	}
	if err := s.client.EndTransaction(ctx, try); err != nil {
		// A commit may have happened; an abort that failed leaves the
		// producer unusable (fenced, its transaction timed out): either
		// way only a new producer's takeover can tell and go on.
		return 0, fmt.Errorf("exactly-once: end transaction: %w: %w", sink.ErrTxnUnknown, err)
	}
	if try == kgo.TryAbort {
		if perr != nil {
			return 0, fmt.Errorf("exactly-once: progress record: %w: %w", ErrAborted, perr)
		}
		return 0, fmt.Errorf("exactly-once: a message failed: %w", ErrAborted)
	}
	s.umu.Lock()
	s.txn++
	n := s.txn
	s.unconfirmed[n] = ids
	s.umu.Unlock()
	return n, nil
}

// Confirm says the database committed transaction n's rows as published:
// later progress records need not name them.
func (s *Shard) Confirm(n uint64) {
	s.umu.Lock()
	delete(s.unconfirmed, n)
	s.umu.Unlock()
}

var _ sink.Publisher = (*Shard)(nil)

// Lanes are a shard's transactional producers, used in turn by its
// batches, so that one batch's transaction can run while the previous one
// commits (a producer has one transaction at a time). Each has its own
// transactional id and progress key (the shard's with "-0", "-1"...).
type Lanes struct {
	lanes []*Shard
}

// NewLanes connects n producers for shard.
func NewLanes(cfg config.Sink, transactionalID, progressTopic string, n int, opts ...Option) (*Lanes, error) {
	l := &Lanes{}
	for i := range max(n, 1) {
		id := fmt.Sprintf("%s-%d", transactionalID, i)
		s, err := NewShard(cfg, id, id, progressTopic, opts...)
		if err != nil {
			l.Close(context.Background())
			return nil, err
		}
		l.lanes = append(l.lanes, s)
	}
	return l, nil
}

// Lanes is how many producers there are.
func (l *Lanes) Lanes() int { return len(l.lanes) }

// Publisher is a publisher of the shard, for what every lane shares
// (the largest message).
func (l *Lanes) Publisher() sink.Publisher { return l.lanes[0] }

// Recover takes the shard over: it fences every lane at once (see
// Shard.fence), then reads the progress topic and returns the ids the
// lanes' latest records name: events in Kafka that the database may not
// have marked. Every lane is fenced before the read, so that none of the
// shard's own transactions is still open while it runs.
func (l *Lanes) Recover(ctx context.Context) ([]string, error) {
	g, gctx := errgroup.WithContext(ctx)
	keys := make([]string, len(l.lanes))
	for i, s := range l.lanes {
		keys[i] = s.shard
		g.Go(func() error { return s.fence(gctx) })
	}
	if err := g.Wait(); err != nil {
		return nil, err
	}
	s := l.lanes[0]
	got, err := readProgress(ctx, s.cfg, s.admin, s.topic, keys)
	if err != nil {
		return nil, err
	}
	var ids []string
	for _, k := range keys {
		ids = append(ids, got[k]...)
	}
	return ids, nil
}

// Begin opens lane's transaction and returns the publisher of its
// messages.
func (l *Lanes) Begin(ctx context.Context, lane int) (sink.Publisher, error) {
	s := l.lanes[lane]
	return s, s.Begin(ctx)
}

// Commit ends lane's transaction (see Shard.Commit).
func (l *Lanes) Commit(ctx context.Context, lane int, ids []string, failed bool) (uint64, error) {
	return l.lanes[lane].Commit(ctx, ids, failed)
}

// Confirm says lane's transaction n is marked in the database.
func (l *Lanes) Confirm(lane int, n uint64) { l.lanes[lane].Confirm(n) }

// Close closes every producer.
func (l *Lanes) Close(ctx context.Context) error {
	var errs []error
	for _, s := range l.lanes {
		errs = append(errs, s.Close(ctx))
	}
	return errors.Join(errs...)
}
