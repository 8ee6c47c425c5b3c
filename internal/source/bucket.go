package source

import (
	"crypto/md5"
	"encoding/binary"
	"fmt"
	"strconv"
)

// MaxBuckets is the most buckets a source can be split into (config
// sources[].shards).
const MaxBuckets = 256

// Bucket is the part of a source one store claims: the rows whose bucket
// key hashes to Index modulo Count. The zero value, like any Count of 1 or
// less, is the whole source.
//
// A row's bucket key is its order key, so that every row of a key lives in
// one bucket and per-key order needs no coordination between buckets; a row
// without an order key (or every row, with ordering off) is bucketed by its
// id, so that such rows spread over every bucket. The hash is the first 32
// bits of the MD5 of the key's UTF-8 bytes, read as an unsigned big-endian
// integer: what BucketOf computes, and what each dialect's SQL computes
// (sqlcore's Hash32) for the claim's predicate.
type Bucket struct {
	Index, Count int
}

// Split says whether the bucket is a part of its source rather than all of
// it.
func (b Bucket) Split() bool { return b.Count > 1 }

// Holds says whether a row whose bucket key is key belongs to the bucket.
func (b Bucket) Holds(key string) bool {
	return !b.Split() || BucketOf(key, b.Count) == b.Index
}

// Validate checks the bucket's count (1 to MaxBuckets) and index (0 to
// Count-1).
func (b Bucket) Validate() error {
	if b.Count == 0 {
		return nil // the whole source
	}
	if b.Count < 1 || b.Count > MaxBuckets {
		return fmt.Errorf("bucket count %d: must be 1 to %d", b.Count, MaxBuckets)
	}
	if b.Index < 0 || b.Index >= b.Count {
		return fmt.Errorf("bucket index %d: must be 0 to %d", b.Index, b.Count-1)
	}
	return nil
}

// String is "index/count", or "all" for the whole source.
func (b Bucket) String() string {
	if !b.Split() {
		return "all"
	}
	return strconv.Itoa(b.Index) + "/" + strconv.Itoa(b.Count)
}

// LeaseName is the lease (shard) of the bucket of source: the source's own
// name for the whole source, as before buckets existed, else
// "<source>/<index>".
func (b Bucket) LeaseName(source string) string {
	if !b.Split() {
		return source
	}
	return source + "/" + strconv.Itoa(b.Index)
}

// BucketOf is the bucket, among count, of a row whose bucket key is key.
func BucketOf(key string, count int) int {
	if count <= 1 {
		return 0
	}
	return int(Hash32(key) % uint32(count))
}

// Hash32 is the first 32 bits of the MD5 of key's UTF-8 bytes, as an
// unsigned big-endian integer: on PostgreSQL
// ('x' || substr(md5(key), 1, 8))::bit(32)::bigint, on MySQL
// CONV(SUBSTR(MD5(key), 1, 8), 16, 10).
func Hash32(key string) uint32 {
	sum := md5.Sum([]byte(key))
	return binary.BigEndian.Uint32(sum[:4])
}

// BucketKey is the key a row is bucketed by: its order key when ordering
// is on and it has one, else its id.
func BucketKey(id, orderKey string, ordering bool) string {
	if ordering && orderKey != "" {
		return orderKey
	}
	return id
}
