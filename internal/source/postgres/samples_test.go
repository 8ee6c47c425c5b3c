package postgres_test

import (
	"context"
	"testing"

	"github.com/outbox-relay/outbox-relay/internal/pgtest"
	"github.com/outbox-relay/outbox-relay/internal/source"
	"github.com/outbox-relay/outbox-relay/internal/source/postgres"
	"github.com/outbox-relay/outbox-relay/internal/source/sourcetest"
)

func TestSamples(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	_, pool := migrated(t)
	sourcetest.Samples(t, sourcetest.SampleKeeper{
		Record: func(xs []source.Sample) error { return postgres.RecordSamples(ctx, pool, relaySchema, xs) },
		Read:   func() ([]source.Sample, error) { return postgres.Samples(ctx, pool, relaySchema) },
		Age: func(s string) {
			pgtest.Exec(t, pool, "UPDATE outbox_relay.source_samples SET at = at - interval '61 minutes' WHERE source = '"+s+"'")
		},
		Stored: func(s string) int {
			var n int
			if err := pool.QueryRow(ctx, "SELECT count(*) FROM outbox_relay.source_samples WHERE source = $1", s).Scan(&n); err != nil {
				t.Fatal(err)
			}
			return n
		},
	})
}
