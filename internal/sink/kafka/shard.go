package kafka

import (
	"context"
	"errors"
	"fmt"

	"golang.org/x/sync/errgroup"

	"github.com/outbox-relay/outbox-relay/internal/config"
	"github.com/outbox-relay/outbox-relay/internal/sink"
)

// Shard is the exactly-once side of one shard (what a lease holds: a
// source): its transactional producers, used in turn by its batches so
// that one batch's transaction can run while the previous one commits (a
// producer has one transaction at a time). Producer i's transactional id
// and progress key are the shard's transactional id with "-i" appended:
// the same on every replica, so that a new holder fences the previous one.
type Shard struct {
	producers []*producer
}

// TransactionalID is the transactional id of shard, which its producers'
// ids extend: the same on every replica.
func TransactionalID(prefix, shard string) string { return prefix + shard }

// NewShard connects n transactional producers (at least one) for the shard
// whose transactional id is transactionalID; progressTopic is where they
// write their progress.
func NewShard(cfg config.Sink, transactionalID, progressTopic string, n int, opts ...Option) (*Shard, error) {
	s := &Shard{}
	for i := range max(n, 1) {
		id := fmt.Sprintf("%s-%d", transactionalID, i)
		p, err := newProducer(cfg, id, id, progressTopic, opts...)
		if err != nil {
			s.Close(context.Background())
			return nil, err
		}
		s.producers = append(s.producers, p)
	}
	return s, nil
}

// Producers is how many transactional producers the shard has.
func (s *Shard) Producers() int { return len(s.producers) }

// Publisher is a publisher of the shard, for what its producers share (the
// largest message).
func (s *Shard) Publisher() sink.Publisher { return s.producers[0] }

// Recover takes the shard over: it fences every producer at once (see
// producer.fence), then reads the progress topic and returns the ids the
// producers' latest records name: events in Kafka that the database may
// not have marked. Every producer is fenced before the read, so that none
// of the shard's own transactions is still open while it runs.
func (s *Shard) Recover(ctx context.Context) ([]string, error) {
	g, gctx := errgroup.WithContext(ctx)
	keys := make([]string, len(s.producers))
	for i, p := range s.producers {
		keys[i] = p.key
		g.Go(func() error { return p.fence(gctx) })
	}
	if err := g.Wait(); err != nil {
		return nil, err
	}
	p := s.producers[0]
	got, err := readProgress(ctx, p.cfg, p.admin, p.topic, keys)
	if err != nil {
		return nil, err
	}
	var ids []string
	for _, k := range keys {
		ids = append(ids, got[k]...)
	}
	return ids, nil
}

// Begin opens a transaction on producer (an index below Producers) and
// returns the publisher of its messages.
func (s *Shard) Begin(ctx context.Context, producer int) (sink.Publisher, error) {
	p := s.producers[producer]
	return p, p.Begin(ctx)
}

// Commit ends producer's transaction (see producer.Commit).
func (s *Shard) Commit(ctx context.Context, producer int, ids []string, failed bool) (uint64, error) {
	return s.producers[producer].Commit(ctx, ids, failed)
}

// Confirm says producer's transaction n is marked in the database.
func (s *Shard) Confirm(producer int, n uint64) { s.producers[producer].Confirm(n) }

// Close closes every producer.
func (s *Shard) Close(ctx context.Context) error {
	var errs []error
	for _, p := range s.producers {
		errs = append(errs, p.Close(ctx))
	}
	return errors.Join(errs...)
}
