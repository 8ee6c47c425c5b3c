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
	"github.com/twmb/franz-go/pkg/kerr"
	"github.com/twmb/franz-go/pkg/kgo"

	"github.com/outbox-relay/outbox-relay/internal/config"
	"github.com/outbox-relay/outbox-relay/internal/sink"
)

// producer is one of a shard's transactional producers: a transactional
// client whose id is derived from the shard alone, and its progress,
// written to a compacted topic under its own key inside each transaction.
//
// A batch's messages and a progress record naming the ids they carry (with
// those of earlier transactions whose database commit is not confirmed yet)
// commit together or not at all. A new holder of the shard takes it over
// (Shard.Recover): initialising the producer id fences any earlier holder
// and aborts its open transaction; the latest committed progress record
// then names every event that reached Kafka and that the database may not
// yet mark.
type producer struct {
	*Publisher // publishes into the open transaction
	admin      *kadm.Client
	cfg        config.Sink
	key        string // the key of its progress records
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
	// Producer is the record's key: the producer's transactional id.
	// Records written before it had this name carry it as "shard"; only
	// the key and IDs are read back.
	Producer string    `json:"producer"`
	IDs      []string  `json:"ids"`
	At       time.Time `json:"at"`
}

// newProducer connects a transactional producer; key is the key of its
// progress records, unique among the relays sharing progressTopic.
func newProducer(cfg config.Sink, transactionalID, key, progressTopic string, opts ...Option) (*producer, error) {
	txnTimeout := cfg.TransactionTimeout.D()
	if txnTimeout <= 0 {
		txnTimeout = max(cfg.Timeout.D()+10*time.Second, 60*time.Second)
	}
	opts = append(opts, transactional(transactionalID, txnTimeout))
	p, err := New(cfg, opts...)
	if err != nil {
		return nil, err
	}
	return &producer{Publisher: p, admin: kadm.NewClient(p.client), cfg: cfg, key: key, topic: progressTopic,
		unconfirmed: map[uint64][]string{}}, nil
}

// fence initialises the producer id: it fences any earlier holder of the
// transactional id and ends its open transaction (aborted, its markers
// written), so that everything the producer ever wrote is decided.
func (p *producer) fence(ctx context.Context) error {
	if _, _, err := p.client.ProducerID(ctx); err != nil {
		return fmt.Errorf("exactly-once: initialise producer %s: %w", p.key, err)
	}
	return nil
}

// readProgress reads topic as read_committed consumers see it, to the end
// each partition has now (its high watermark), and returns the ids of the
// latest record of each of keys. Call it once the producer of every key is
// fenced: all their records before the end are then decided.
//
// The read goes to the high watermark, not to the last stable offset that a
// read_committed listing returns: a transaction of another producer still
// open on the topic (another shard's, or one of this shard's not fenced
// yet) holds the last stable offset back, and a producer's own record
// committed after that transaction began lies beyond it; reading only that
// far returned an older record, and the events of the newer one were sent
// again. Such a transaction ends soon (it writes its progress just before
// its commit), or at its transaction timeout; the read waits for it.
// Transaction markers come back too, so a partition whose last records
// were aborted is also read to its end.
func readProgress(ctx context.Context, cfg config.Sink, admin *kadm.Client, topic string, keys []string) (map[string][]string, error) {
	ends, err := admin.ListEndOffsets(ctx, topic)
	if err != nil {
		return nil, fmt.Errorf("exactly-once: progress topic %q: %w", topic, err)
	}
	if err := ends.Error(); err != nil {
		// With auto_create_topics the look-up itself has the topic
		// created (the client's metadata requests ask for it).
		if errors.Is(err, kerr.UnknownTopicOrPartition) {
			return nil, fmt.Errorf("exactly-once: progress topic %q does not exist: create it (compacted, one partition is enough; "+
				"see progress_topic), or set auto_create_topics on the sink: %w", topic, err)
		}
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
			if r.Offset < end && !r.Attrs.IsControl() && slices.Contains(keys, string(r.Key)) {
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

// Begin opens the producer's transaction for one batch, waiting for its
// previous batch's to end.
func (p *producer) Begin(ctx context.Context) error {
	p.mu.Lock()
	if err := p.client.BeginTransaction(); err != nil {
		p.mu.Unlock()
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
func (p *producer) Commit(ctx context.Context, ids []string, failed bool) (uint64, error) {
	defer p.mu.Unlock()
	try := kgo.TryCommit
	var perr error
	if failed {
		try = kgo.TryAbort
	} else {
		p.umu.Lock()
		all := append([]string(nil), ids...)
		for _, u := range p.unconfirmed {
			all = append(all, u...)
		}
		p.umu.Unlock()
		v, err := json.Marshal(progress{Producer: p.key, IDs: all, At: time.Now().UTC()})
		if err != nil {
			return 0, err
		}
		perr = p.client.ProduceSync(ctx, &kgo.Record{Topic: p.topic, Key: []byte(p.key), Value: v}).FirstErr()
		if perr != nil {
			try = kgo.TryAbort
		}
	}
	if err := p.client.Flush(ctx); err != nil && try == kgo.TryCommit {
		try, perr = kgo.TryAbort, err
	}
	if err := p.client.EndTransaction(ctx, try); err != nil {
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
	p.umu.Lock()
	p.txn++
	n := p.txn
	p.unconfirmed[n] = ids
	p.umu.Unlock()
	return n, nil
}

// Confirm says the database committed transaction n's rows as published:
// later progress records need not name them.
func (p *producer) Confirm(n uint64) {
	p.umu.Lock()
	delete(p.unconfirmed, n)
	p.umu.Unlock()
}

var _ sink.Publisher = (*producer)(nil)
