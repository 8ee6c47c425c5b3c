package kafka

import (
	"context"
	"hash/fnv"

	"github.com/twmb/franz-go/pkg/kgo"
)

// partitionKeyCtx carries a message's partition key on its record's Context.
// A pointer to a string is unique, unlike a zero-size key type.
var partitionKeyCtx = func() *string { s := "partition_key"; return &s }()

func withPartitionKey(ctx context.Context, key []byte) context.Context {
	return context.WithValue(ctx, partitionKeyCtx, key)
}

func partitionKey(r *kgo.Record) []byte {
	if r.Context == nil {
		return nil
	}
	key, _ := r.Context.Value(partitionKeyCtx).([]byte)
	return key
}

// partitioner is franz-go's sticky key partitioner (murmur2 like the Java
// client, sticky for records without a key) that hashes a record's partition
// key, when it has one, instead of its Key. With sarama set it hashes as
// sarama's default partitioner does (FNV-1a), so that a deployment moving
// from a sarama-based relay keeps each key on its partition.
type partitioner struct{ inner kgo.Partitioner }

func newPartitioner(sarama bool) kgo.Partitioner {
	if sarama {
		return partitioner{kgo.StickyKeyPartitioner(kgo.SaramaCompatHasher(fnv1a))}
	}
	return partitioner{kgo.StickyKeyPartitioner(nil)}
}

func fnv1a(b []byte) uint32 {
	h := fnv.New32a()
	_, _ = h.Write(b)
	return h.Sum32()
}

func (p partitioner) ForTopic(topic string) kgo.TopicPartitioner {
	return &topicPartitioner{inner: p.inner.ForTopic(topic)}
}

type topicPartitioner struct {
	inner kgo.TopicPartitioner
	// scratch stands in for a record that has a partition key. franz-go
	// uses one topic partitioner for one record at a time.
	scratch kgo.Record
}

func (p *topicPartitioner) RequiresConsistency(r *kgo.Record) bool {
	return partitionKey(r) != nil || p.inner.RequiresConsistency(r)
}

func (p *topicPartitioner) Partition(r *kgo.Record, n int) int {
	key := partitionKey(r)
	if key == nil {
		return p.inner.Partition(r, n)
	}
	p.scratch.Topic, p.scratch.Key = r.Topic, key
	part := p.inner.Partition(&p.scratch, n)
	p.scratch.Key = nil
	return part
}

// OnNewBatch lets the sticky part move on to another partition.
func (p *topicPartitioner) OnNewBatch() {
	if nb, ok := p.inner.(kgo.TopicPartitionerOnNewBatch); ok {
		nb.OnNewBatch()
	}
}
