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
// commit together or not at all. A new holder of the shard calls Recover:
// initialising the producer id fences any earlier holder and aborts its
// open transaction; the latest committed progress record then names every
// event that reached Kafka and that the database may not yet mark.
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

// Recover takes the shard over: it initialises the producer id, which
// fences an earlier holder and ends its open transaction, then reads the
// progress topic as read_committed consumers see it and returns the ids of
// the latest record: events in Kafka that the database may not have
// marked.
func (s *Shard) Recover(ctx context.Context) ([]string, error) {
	if _, _, err := s.client.ProducerID(ctx); err != nil {
		return nil, fmt.Errorf("exactly-once: initialise the producer of shard %s: %w", s.shard, err)
	}
	ends, err := s.admin.ListCommittedOffsets(ctx, s.topic)
	if err != nil {
		return nil, fmt.Errorf("exactly-once: progress topic %q: %w", s.topic, err)
	}
	if err := ends.Error(); err != nil {
		return nil, fmt.Errorf("exactly-once: progress topic %q: %w", s.topic, err)
	}
	want := map[int32]int64{}
	ends.Each(func(o kadm.ListedOffset) {
		if o.Offset > 0 {
			want[o.Partition] = o.Offset
		}
	})
	if len(want) == 0 {
		return nil, nil
	}
	kopts, err := consumerOpts(s.cfg, s.topic)
	if err != nil {
		return nil, err
	}
	cl, err := kgo.NewClient(kopts...)
	if err != nil {
		return nil, err
	}
	defer cl.Close()
	// Read up to the end each partition had when the producer id was
	// initialised. Transaction markers come back too (they are often the
	// last records before the end); a partition whose last records before
	// the end are aborted ones is done once a fetch brings nothing more.
	var last *progress
	for len(want) > 0 {
		pctx, cancel := context.WithTimeout(ctx, progressQuiet)
		fs := cl.PollFetches(pctx)
		cancel()
		if err := ctx.Err(); err != nil {
			return nil, err
		}
		if fs.Empty() {
			break
		}
		for _, fe := range fs.Errors() {
			if !errors.Is(fe.Err, context.DeadlineExceeded) {
				return nil, fmt.Errorf("exactly-once: read progress topic %q: %w", s.topic, fe.Err)
			}
		}
		fs.EachRecord(func(r *kgo.Record) {
			if end, ok := want[r.Partition]; ok && r.Offset < end && !r.Attrs.IsControl() && string(r.Key) == s.shard {
				var p progress
				if json.Unmarshal(r.Value, &p) == nil {
					last = &p
				}
			}
			if end, ok := want[r.Partition]; ok && r.Offset+1 >= end {
				delete(want, r.Partition)
			}
		})
	}
	if last == nil {
		return nil, nil
	}
	return last.IDs, nil
}

// progressQuiet is how long a read of the progress topic waits for more
// before taking the records it has for all there is.
const progressQuiet = 500 * time.Millisecond

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

// Recover takes every lane over at once (see Shard.Recover) and returns
// the ids their progress records name.
func (l *Lanes) Recover(ctx context.Context) ([]string, error) {
	got := make([][]string, len(l.lanes))
	g, gctx := errgroup.WithContext(ctx)
	for i, s := range l.lanes {
		g.Go(func() (err error) {
			got[i], err = s.Recover(gctx)
			return err
		})
	}
	if err := g.Wait(); err != nil {
		return nil, err
	}
	return slices.Concat(got...), nil
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
