package kafka

import (
	"context"
	"testing"

	"github.com/twmb/franz-go/pkg/kgo"
)

// javaMurmur2 holds Kafka's own test vectors for Utils.murmur2 (UtilsTest),
// as the signed 32-bit values Java returns.
var javaMurmur2 = map[string]int32{
	"21":                         -973932308,
	"foobar":                     -790332482,
	"a-little-bit-long-string":   -985981536,
	"a-little-bit-longer-string": -1486304829,
	"lkjh234lh9fiuh90y23oiuhsafujhadof229phr9h19h89h8": -58897971,
	"abc": 479470107,
}

// javaPartition is Kafka's default partitioner for a keyed record:
// Utils.toPositive(murmur2(key)) % numPartitions.
func javaPartition(hash int32, n int) int {
	return int(hash&0x7fffffff) % n
}

func TestPartitionerMatchesJava(t *testing.T) {
	t.Parallel()
	p := newPartitioner(false).ForTopic("t")
	for key, hash := range javaMurmur2 {
		for _, n := range []int{1, 7, 12, 100} {
			want := javaPartition(hash, n)
			byKey := &kgo.Record{Topic: "t", Key: []byte(key), Context: context.Background()}
			if got := p.Partition(byKey, n); got != want {
				t.Errorf("key %q, %d partitions: got %d, Java gives %d", key, n, got, want)
			}
			// The partition key wins over the record key.
			byPK := &kgo.Record{Topic: "t", Key: []byte("other"), Context: withPartitionKey(context.Background(), []byte(key))}
			if got := p.Partition(byPK, n); got != want {
				t.Errorf("partition key %q, %d partitions: got %d, Java gives %d", key, n, got, want)
			}
			if !p.RequiresConsistency(byPK) {
				t.Errorf("partition key %q: RequiresConsistency false", key)
			}
		}
	}
}

func TestPartitionerDistinguishesPartitionKey(t *testing.T) {
	t.Parallel()
	p := newPartitioner(false).ForTopic("t")
	// With 100 partitions "21" and "foobar" land apart, so a partitioner
	// that ignored the partition key would be caught.
	if javaPartition(javaMurmur2["21"], 100) == javaPartition(javaMurmur2["foobar"], 100) {
		t.Fatal("test keys collide")
	}
	r := &kgo.Record{Topic: "t", Key: []byte("21"), Context: withPartitionKey(context.Background(), []byte("foobar"))}
	if got, want := p.Partition(r, 100), javaPartition(javaMurmur2["foobar"], 100); got != want {
		t.Fatalf("got partition %d, want %d (from the partition key)", got, want)
	}
	// An empty, non-nil partition key is still a key.
	r = &kgo.Record{Topic: "t", Key: []byte("21"), Context: withPartitionKey(context.Background(), []byte{})}
	if !p.RequiresConsistency(r) {
		t.Fatal("empty partition key: RequiresConsistency false")
	}
}

func TestPartitionerStickyWithoutKey(t *testing.T) {
	t.Parallel()
	p := newPartitioner(false).ForTopic("t")
	r := &kgo.Record{Topic: "t", Context: context.Background()}
	if p.RequiresConsistency(r) {
		t.Fatal("record without key: RequiresConsistency true")
	}
	first := p.Partition(r, 1000)
	for range 10 {
		if got := p.Partition(r, 1000); got != first {
			t.Fatalf("keyless records moved from %d to %d without a new batch", first, got)
		}
	}
	nb, ok := p.(kgo.TopicPartitionerOnNewBatch)
	if !ok {
		t.Fatal("partitioner does not pass OnNewBatch on")
	}
	moved := false
	for range 20 {
		nb.OnNewBatch()
		if p.Partition(r, 1000) != first {
			moved = true
			break
		}
	}
	if !moved {
		t.Fatal("keyless records never left their partition after new batches")
	}
}

// TestSaramaPartitioner: with partitioner sarama, keys land where sarama's
// default hash partitioner puts them (FNV-1a as a signed 32-bit number, its
// remainder's absolute value). The expected partitions among 50 were
// computed apart from Go, including keys whose hash is negative as int32.
func TestSaramaPartitioner(t *testing.T) {
	p := newPartitioner(true).ForTopic("t")
	for key, want := range map[string]int{
		"customer-1":               23,
		"order-42":                 2,
		"a-little-bit-long-string": 4, // hash negative as int32
		"21":                       2, // hash negative as int32
	} {
		if got := p.Partition(&kgo.Record{Topic: "t", Key: []byte(key)}, 50); got != want {
			t.Errorf("key %q: partition %d, want %d", key, got, want)
		}
	}
}
