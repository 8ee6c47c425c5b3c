package sourcetest

import (
	"fmt"
	"slices"
	"testing"

	"github.com/outbox-relay/outbox-relay/internal/source"
)

// HashVectors are keys with the bucket hash both databases give them
// (PostgreSQL's ('x' || substr(md5(k), 1, 8))::bit(32)::bigint and MySQL's
// CONV(SUBSTR(MD5(k), 1, 8), 16, 10), run on each): source.Hash32 must give
// the same, and each dialect's hash expression too.
var HashVectors = []struct {
	Key  string
	Hash uint32
}{
	{"", 3558706393},
	{"a", 214005177},
	{"ffff", 3974702808},
	{"Café", 1180024084},
	{"日本", 1304351462},
	{"00000000-0000-4000-8000-000000000001", 1167882649},
	{"ü-Ω-😀", 1018659453}, // four-byte UTF-8 too
}

// bucketRows builds rows over keys keys (from k0), rounds rows a key,
// round after round: every key's first row, then every key's second, and
// so on. Where the layout has a partition key (the order key), it is a
// non-ASCII text, so that the database's hash of it is compared with Go's.
func (s *suite) bucketRows(keys, rounds, k0 int) []Row {
	var rs []Row
	for r := range rounds {
		for k := range keys {
			row := Row{Topic: "sourcetest.events", Key: key(k0 + k), Payload: fmt.Sprintf(`{"key": %d, "round": %d}`, k, r)}
			if s.exp.partitionKey {
				row.PartitionKey = fmt.Sprintf("tenant-é-日本-%d", k0+k)
			}
			rs = append(rs, row)
		}
	}
	return rs
}

// inBucket checks that every row of b is in bucket bk by Go's reckoning
// (source.BucketOf): the database's hash and Go's agree.
func inBucket(t *testing.T, b source.Batch, bk source.Bucket, ordering bool) {
	t.Helper()
	for _, r := range rowsOf(b) {
		k := source.BucketKey(r.ID, r.OrderKey, ordering)
		if got := source.BucketOf(k, bk.Count); got != bk.Index {
			t.Errorf("a store of bucket %s claimed row %s (bucket key %q), which is in bucket %d/%d", bk, r.ID, k, got, bk.Count)
		}
	}
}

// testBucketsPartition: the stores of buckets 0/2 and 1/2 claim disjoint
// sets of rows, each in its bucket as Go computes it, whose union is every
// row; with ordering, every row of a key is in one bucket; without, rows
// spread by id.
func (s *suite) testBucketsPartition(t *testing.T) {
	for _, ordering := range []bool{true, false} {
		t.Run(fmt.Sprintf("ordering=%v", ordering), func(t *testing.T) {
			tbl, src := s.newTable(t)
			rs := s.bucketRows(12, 3, 1000)
			if !s.caps.KeyRequired {
				for i := range 6 {
					rs = append(rs, Row{Topic: "sourcetest.events", Payload: fmt.Sprintf(`{"keyless": %d}`, i)})
				}
			}
			want := tbl.Insert(t, rs...)
			claimed := map[string]source.Bucket{}
			for i := range 2 {
				bk := source.Bucket{Index: i, Count: 2}
				b := claim(t, tbl.Open(t, Options{Source: src, Ordering: ordering, Bucket: bk}), 2*len(want))
				defer release(t, b)
				inBucket(t, b, bk, ordering)
				keys := map[string]bool{}
				for _, r := range rowsOf(b) {
					if o, dup := claimed[r.ID]; dup {
						t.Errorf("row %s claimed by the stores of buckets %s and %s", r.ID, o, bk)
					}
					claimed[r.ID] = bk
					keys[r.OrderKey] = true
				}
				if len(keys) < 2 {
					t.Errorf("the store of bucket %s claimed the rows of %d keys: the rows do not spread", bk, len(keys))
				}
			}
			for _, id := range want {
				if _, ok := claimed[id]; !ok {
					t.Errorf("row %s claimed by neither bucket", id)
				}
			}
		})
	}
}

// testBucketCountChange: while the shard count of a source changes, the
// holders of old and new buckets claim side by side; a store of bucket i/4
// claiming while a store of bucket j/2 holds a batch (and the other way
// round) never claims a row of a key whose earlier row the other holds, and
// still claims the rows of every other key of its bucket.
func (s *suite) testBucketCountChange(t *testing.T) {
	tbl, src := s.newTable(t)
	const keys, rounds = 24, 3
	id := tbl.Insert(t, s.bucketRows(keys, rounds, 1100)...)
	open := func(bk source.Bucket) source.Store {
		return tbl.Open(t, Options{Source: src, Ordering: true, Bucket: bk})
	}
	// The first claim tells each row's order key.
	all := claim(t, open(source.Bucket{}), len(id))
	if got := ids(all); !slices.Equal(got, id) {
		release(t, all)
		t.Fatalf("claimed %v, want every row in order %v", got, id)
	}
	orderKey := map[string]string{}
	for _, r := range all.Rows() {
		orderKey[r.ID] = r.OrderKey
	}
	release(t, all)
	bucketOf := func(rowID string, count int) int { return source.BucketOf(orderKey[rowID], count) }
	for i := range 4 {
		if !slices.ContainsFunc(id, func(r string) bool { return bucketOf(r, 4) == i }) {
			t.Fatalf("no key of the test is in bucket %d/4: pick other keys", i)
		}
	}

	for _, tc := range []struct{ holder, claimer source.Bucket }{
		{source.Bucket{Index: 0, Count: 2}, source.Bucket{Index: 0, Count: 4}},
		{source.Bucket{Index: 0, Count: 2}, source.Bucket{Index: 1, Count: 4}},
		{source.Bucket{Index: 0, Count: 2}, source.Bucket{Index: 2, Count: 4}},
		{source.Bucket{Index: 1, Count: 2}, source.Bucket{Index: 3, Count: 4}},
		{source.Bucket{Index: 1, Count: 4}, source.Bucket{Index: 1, Count: 2}},
		{source.Bucket{Index: 2, Count: 4}, source.Bucket{Index: 0, Count: 2}},
	} {
		t.Run(fmt.Sprintf("%s holds, %s claims", tc.holder, tc.claimer), func(t *testing.T) {
			// The holder takes the first row of each of its keys.
			var first []string
			for _, r := range id[:keys] {
				if bucketOf(r, tc.holder.Count) == tc.holder.Index {
					first = append(first, r)
				}
			}
			hold := claim(t, open(tc.holder), len(first))
			defer release(t, hold)
			if got := ids(hold); !slices.Equal(got, first) {
				t.Fatalf("the store of bucket %s claimed %v, want the first row of each of its keys %v", tc.holder, got, first)
			}
			held := map[string]bool{}
			for _, r := range hold.Rows() {
				held[r.OrderKey] = true
			}
			// The claimer may take every row of its keys that the holder
			// does not hold, and no row of the keys it holds.
			var want []string
			for _, r := range id {
				if bucketOf(r, tc.claimer.Count) == tc.claimer.Index && !held[orderKey[r]] {
					want = append(want, r)
				}
			}
			b := claim(t, open(tc.claimer), len(id))
			defer release(t, b)
			inBucket(t, b, tc.claimer, true)
			for _, r := range rowsOf(b) {
				if held[r.OrderKey] {
					t.Errorf("the store of bucket %s claimed row %s of key %s while the store of bucket %s holds an earlier row of it",
						tc.claimer, r.ID, r.OrderKey, tc.holder)
				}
			}
			if got := ids(b); !slices.Equal(got, want) {
				t.Errorf("the store of bucket %s claimed %v, want %v (the rows of its keys the store of bucket %s holds none of)",
					tc.claimer, got, want, tc.holder)
			}
		})
	}
}

// rowsOf is the rows of b, none when b is nil (nothing claimed).
func rowsOf(b source.Batch) []source.Row {
	if b == nil {
		return nil
	}
	return b.Rows()
}

// testBucketOwnBatches: a store of a bucket holding a batch still claims
// the later rows of its keys (the order book of its relay keeps their
// order, as for a whole source): only another claimer's rows hold a key.
func (s *suite) testBucketOwnBatches(t *testing.T) {
	tbl, src := s.newTable(t)
	id := tbl.Insert(t, s.bucketRows(8, 3, 1200)...)
	st := tbl.Open(t, Options{Source: src, Ordering: true, Bucket: source.Bucket{Index: 0, Count: 2}})
	first := claim(t, st, 1)
	defer release(t, first)
	if first == nil {
		t.Fatal("the store of bucket 0/2 claimed nothing")
	}
	head := first.Rows()[0]
	var want []string
	again := claim(t, st, len(id))
	defer release(t, again)
	inBucket(t, again, source.Bucket{Index: 0, Count: 2}, true)
	for _, r := range rowsOf(again) {
		if r.OrderKey == head.OrderKey {
			want = append(want, r.ID)
		}
	}
	if len(want) != 2 {
		t.Errorf("the second claim took %d later rows of key %s, want its 2 later rows: the store's own batch held the key", len(want), head.OrderKey)
	}
}

// testBucketWindowPassesOwnBatches: the window of a bucket's claim leaves
// out the rows of the store's own batches in flight (it is sized for the
// claim alone, see source.BucketWindow): a store holding a full batch
// still claims a full batch, the next rows of its bucket.
func (s *suite) testBucketWindowPassesOwnBatches(t *testing.T) {
	tbl, src := s.newTable(t)
	const n = 16
	bk := source.Bucket{Index: 0, Count: 2}
	tbl.Insert(t, s.bucketRows(4*n, 2, 1300)...)
	st := tbl.Open(t, Options{Source: src, Ordering: true, Bucket: bk})
	var held []string
	for i := range 3 {
		b := claim(t, st, n)
		defer release(t, b)
		inBucket(t, b, bk, true)
		got := ids(b)
		if len(got) != n {
			t.Fatalf("claim %d took %d rows while the store held %d: want a full batch of %d", i+1, len(got), len(held), n)
		}
		for _, id := range got {
			if slices.Contains(held, id) {
				t.Fatalf("claim %d took row %s, which the store holds already", i+1, id)
			}
		}
		held = append(held, got...)
	}
}
