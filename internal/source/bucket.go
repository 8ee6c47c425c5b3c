package source

import (
	"crypto/md5"
	"encoding/binary"
	"fmt"
	"strconv"
	"sync/atomic"
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

// BucketWindow sizes the window of the claims of one bucket of a source
// (with ordering): how many of the bucket's rows a claim considers. Such a
// window leaves out the rows of the store's own batches in flight, so it
// need not reach past them; but it passes over the other buckets' rows,
// each hashed to tell its bucket, and every row it holds beyond those the
// claim takes is read again by the next claim. So the window is the limit
// and an eighth while the claims come back full, and reaches twice the
// limit (what a whole source's window reaches past its own batches) after
// a claim came back short: rows in the window that could not be taken
// (another claimer holds their key), or the end of the backlog. The reach
// then shrinks by half a claim at a time. The zero value starts at twice
// the limit. Safe for concurrent use.
type BucketWindow struct {
	// extra is how far past the limit the window reaches, as a share of
	// the limit in 1/64ths: 64 after a short claim, then halved by each
	// full claim down to 8.
	extra atomic.Int64
}

const (
	windowExtraMax = 64
	windowExtraMin = windowExtraMax / 8
)

// Size is the window of a claim of limit.
func (w *BucketWindow) Size(limit int) int {
	e := w.extra.Load()
	if e == 0 {
		e = windowExtraMax
	}
	return limit + int(int64(limit)*e/windowExtraMax)
}

// Claimed records that a claim of limit took got rows.
func (w *BucketWindow) Claimed(limit, got int) {
	if got < limit {
		w.extra.Store(windowExtraMax)
		return
	}
	e := w.extra.Load()
	if e == 0 {
		e = windowExtraMax
	}
	w.extra.Store(max(e/2, windowExtraMin))
}
