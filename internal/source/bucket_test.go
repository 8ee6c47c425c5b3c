package source_test

import (
	"testing"

	. "github.com/outbox-relay/outbox-relay/internal/source"
	"github.com/outbox-relay/outbox-relay/internal/source/sourcetest"
)

func TestHash32PinsTheDatabasesValues(t *testing.T) {
	for _, v := range sourcetest.HashVectors {
		if got := Hash32(v.Key); got != v.Hash {
			t.Errorf("Hash32(%q) = %d, want %d", v.Key, got, v.Hash)
		}
	}
}

func TestBucketOf(t *testing.T) {
	for _, tc := range []struct {
		key   string
		count int
		want  int
	}{
		{"a", 1, 0},
		{"a", 0, 0},
		{"a", 2, 214005177 % 2},
		{"a", 256, 214005177 % 256},
		{"", 7, 3558706393 % 7}, // above 2^31: read unsigned
		{"Café", 4, 1180024084 % 4},
	} {
		if got := BucketOf(tc.key, tc.count); got != tc.want {
			t.Errorf("BucketOf(%q, %d) = %d, want %d", tc.key, tc.count, got, tc.want)
		}
	}
}

func TestBucketsPartitionKeys(t *testing.T) {
	const n = 4
	seen := make([]int, n)
	for i := range 1000 {
		k := string(rune('a'+i%26)) + string(rune(0x4e00+i))
		owners := 0
		for b := range n {
			if (Bucket{Index: b, Count: n}).Holds(k) {
				owners++
				seen[b]++
			}
		}
		if owners != 1 {
			t.Fatalf("key %q is in %d buckets of %d, want exactly one", k, owners, n)
		}
	}
	for b, c := range seen {
		if c < 150 {
			t.Errorf("bucket %d/%d holds %d of 1000 keys: the hash does not spread", b, n, c)
		}
	}
}

func TestBucketKey(t *testing.T) {
	if got := BucketKey("17", "order-9", true); got != "order-9" {
		t.Errorf("ordered row with a key: %q, want its key", got)
	}
	if got := BucketKey("17", "", true); got != "17" {
		t.Errorf("keyless row: %q, want its id", got)
	}
	if got := BucketKey("17", "order-9", false); got != "17" {
		t.Errorf("ordering off: %q, want the id", got)
	}
}

func TestBucketValidateAndNames(t *testing.T) {
	for _, b := range []Bucket{{}, {0, 1}, {3, 4}, {255, 256}} {
		if err := b.Validate(); err != nil {
			t.Errorf("%+v: %v", b, err)
		}
	}
	for _, b := range []Bucket{{0, 257}, {4, 4}, {-1, 2}, {0, -1}} {
		if err := b.Validate(); err == nil {
			t.Errorf("%+v validated", b)
		}
	}
	if got := (Bucket{0, 1}).LeaseName("orders"); got != "orders" {
		t.Errorf("lease of a whole source %q, want the source's name", got)
	}
	if got := (Bucket{2, 4}).LeaseName("orders"); got != "orders/2" {
		t.Errorf("lease of bucket 2/4 %q, want orders/2", got)
	}
}

// TestBucketWindow: a bucket's window is twice the limit at first and
// after a claim that came back short, and shrinks by half its reach past
// the limit with each full claim, to an eighth of the limit.
func TestBucketWindow(t *testing.T) {
	var w BucketWindow
	const limit = 1000
	for i, want := range []int{2000, 1500, 1250, 1125, 1125} {
		if got := w.Size(limit); got != want {
			t.Fatalf("window after %d full claims: %d, want %d", i, got, want)
		}
		w.Claimed(limit, limit)
	}
	w.Claimed(limit, limit-1)
	if got := w.Size(limit); got != 2000 {
		t.Fatalf("window after a short claim: %d, want 2000", got)
	}
	w.Claimed(limit, limit)
	if got := w.Size(10); got != 15 {
		t.Fatalf("window of a claim of 10: %d, want 15", got)
	}
}
