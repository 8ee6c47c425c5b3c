package postgres

import (
	"context"
	"testing"

	"github.com/outbox-relay/outbox-relay/internal/pgtest"
	"github.com/outbox-relay/outbox-relay/internal/source"
	"github.com/outbox-relay/outbox-relay/internal/source/sourcetest"
)

// TestHash32MatchesGo checks that the bucket hash the claims compute in SQL
// is Go's (source.Hash32) on every key of the vectors, non-ASCII ones
// included.
func TestHash32MatchesGo(t *testing.T) {
	t.Parallel()
	_, pool := pgtest.NewDB(t)
	for _, v := range sourcetest.HashVectors {
		var got int64
		if err := pool.QueryRow(context.Background(), "SELECT "+dialect{}.Hash32("$1::text"), v.Key).Scan(&got); err != nil {
			t.Fatal(err)
		}
		if got != int64(v.Hash) || uint32(got) != source.Hash32(v.Key) {
			t.Errorf("hash of %q: PostgreSQL %d, Go %d, want %d", v.Key, got, source.Hash32(v.Key), v.Hash)
		}
	}
}
