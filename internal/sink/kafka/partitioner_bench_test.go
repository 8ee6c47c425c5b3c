package kafka

import (
	"context"
	"testing"

	"github.com/twmb/franz-go/pkg/kgo"
)

// BenchmarkPartition is murmur2 partitioning by key and by partition key.
func BenchmarkPartition(b *testing.B) {
	tp := newPartitioner(false).ForTopic("orders")
	byKey := &kgo.Record{Topic: "orders", Key: []byte("order-4711")}
	byPartitionKey := &kgo.Record{Topic: "orders", Key: []byte("order-4711"),
		Context: withPartitionKey(context.Background(), []byte("tenant-42"))}
	b.Run("key", func(b *testing.B) {
		for b.Loop() {
			_ = tp.Partition(byKey, 12)
		}
	})
	b.Run("partition-key", func(b *testing.B) {
		for b.Loop() {
			_ = tp.Partition(byPartitionKey, 12)
		}
	})
}
